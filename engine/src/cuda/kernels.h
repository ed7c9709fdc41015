#pragma once
// Host launchers of the CUDA ops, one op family per .cu file. Every pointer is device
// memory; activations are f32, weight matrices keep the model's dtype, and norm weights
// and biases arrive widened to f32. Shapes are [rows, cols] row-major; n is the number of
// tokens in the step and pos points at the device int holding the first token's position.
// Every launch uses programmatic dependent launch: each kernel prefetches its weights
// before it waits for the kernel that feeds it.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "model/tensor.h"

namespace runahead::cuda {

// RUNAHEAD_CUDA_PDL=0 in the environment turns programmatic dependent launch off, to
// measure what it gains.
bool pdl_enabled();

// The matrix-vector ops serve up to this many tokens per pass over the weights: a verify step
// of up to kMaxVecTokens - 1 = 16 drafted tokens. Each kernel is built for 1, 2, 4, up to
// kMidVecTokens and up to kMaxVecTokens tokens (a wider build costs the narrower steps
// registers and latency they do not need: common.cuh for_vec_tokens).
constexpr int kMidVecTokens = 8;
constexpr int kMaxVecTokens = 17;

// What the last kernel of a step does once its tokens are known: tokens[t] for t < n_out
// go to out[t] and to host[*pos + 1 + t - (n_out - 1) ... ] (mapped host memory indexed by the
// position the token will occupy), the last one becomes next[0] (the next step's input),
// and *pos advances by `advance`. Null pointers skip their part.
// A greedy verify step (draft set: the step's input tokens, all n with a row) keeps the
// drafted tokens draft[1..] while each equals the argmax of the row before it: *pos advances
// by 1 + accepted only, next[0] gets the argmax after the accepted ones, and verdict (mapped
// host memory) gets {accepted, that token}.
struct StepEnd {
  int* pos = nullptr;
  int advance = 0;
  int32_t* out = nullptr;
  int32_t* next = nullptr;
  int32_t* host = nullptr;
  const int32_t* draft = nullptr;
  int32_t* verdict = nullptr;
};

// The inputs of a Q8_0 or K-quant matrix (dtype Q4_K on the device, kquant.cuh) quantized to
// int8 per 32 values, as llama.cpp's q8_1: q [n, K] bytes, d [n, K / 32] floats, for
// n <= kMaxVecTokens and K up to the widest input of the model's matrices (the backend
// allocates them). A single token's norm-fused ops quantize in the kernel instead.
struct Q8Scratch {
  int8_t* q = nullptr;
  float* d = nullptr;
  int8_t* planar = nullptr;  // K bytes: one token's q pair-planar (kquant.cuh Q8Inputs::planar)
};
// kquant.cu — s = x[t, :] * g (g null: 1) quantized per 32 for t < n; K a multiple of 32; for
// one token with s.planar set (K a multiple of 64, as a K-quant row's is), its pair-planar copy too.
// trigger_first: the next kernel may launch as soon as this one has (its blocks' part before
// their own pdl_wait reading weights alone, as every kernel's does), not once x is in.
void quantize_inputs_q8(const float* x, const float* g, int n, int K, const Q8Scratch& s, cudaStream_t stream,
                        bool trigger_first = false);
// Whether a backend loaded now gives one token's Q4_K products pair-planar inputs where they
// are staged or quantized for them (RUNAHEAD_CUDA_KQ_PLANAR=0: no, to measure); a backend that
// does has Q8Scratch::planar.
bool kq_planar_enabled();

// embedding.cu — x[t, :] = embed[tokens[t], :]   embed: [V, H], x: [n, H]; `scale`: Q8_0's
// block scales, a K-quant table's Q6_K rows (as matvec_residual_add's; the table is all Q4_K
// or all Q6_K), else null
void embedding_lookup(const void* embed, DType dtype, const void* scale, int H, const int32_t* tokens, int n, float* x,
                      cudaStream_t stream);

// One token's product with a K-quant or Q8_0 matrix (Q8_0: rows of a multiple of 256 weights)
// may stream its rows through a ring of bulk copies in shared memory (kquant_ring.cuh) rather
// than each warp loading its own: Auto where the shape measured faster for it (x += in W^T and
// gate/up: wherever it fits, two stages of 8 rows or, for long rows such as down's, of fewer
// rows with several warps a row; q/k/v: where there are enough tiles, a tile for every two
// multiprocessors), Forced wherever it can run, Off never.
enum class KqRing { Off, Auto, Forced };
// The tiles each block of a bulk-copy ring keeps in flight (RingFlags::in_flight): one, each asked
// for once the one before it is in: on an H100 the 1.5B Q4_K_M decodes 7 % faster than with every
// stage in flight, the 7B 3 % (NOTES.md v36). The backend reads RUNAHEAD_CUDA_RING_IN_FLIGHT=n at
// load (0: every stage) and passes it to each ring's launch.
constexpr int kRingTilesInFlight = 1;
// The first bytes the next ring will read (its first tiles' runs of rows, kquant_ring.cuh
// ring_prefix), at most kRingPrefetchRanges runs of bytes, each a multiple of 16 at an address
// aligned to 16: a ring's producers, each once it has asked for its block's last tile, prefetch
// them into L2, every block an equal part, so that memory goes on streaming weights while this
// ring's last tiles are summed and the next ring's blocks start and stage their inputs (the
// kernels between, attention or a quantize, read little). The backend asks for the first
// kRingPrefetchKb KB of the next matrix's tiles (RUNAHEAD_CUDA_RING_PREFETCH=KB sets another
// amount, 0 none, to measure). H100, ms/token against none (NOTES v49): 1.5B Q4_K_M x0.978-0.983,
// 7B Q4_K_M x0.996-0.999, 7B Q8_0 x0.995-0.996; 8 MB: x0.968 / 0.990 / 1.008-1.011 (on the
// stepped consumers); prefetched right after a producer's first tiles instead of after its last:
// 1.5B x0.982-0.986, 7B Q4_K_M x1.007-1.011 (removed). Going on into the rings after the next
// where the next is smaller than the amount (the 1.5B's q/k/v and o_proj): 1.5B x1.006 at 2 MB,
// x1.009 at 4 MB, x1.033 at 8 MB; the 7B x0.997-1.015 (NOTES v50; removed).
constexpr int kRingPrefetchKb = 2048;
constexpr int kRingPrefetchRanges = 4;
struct RingPrefetch {
  const void* at[kRingPrefetchRanges] = {};
  unsigned bytes[kRingPrefetchRanges] = {};
};
// How a bulk-copy ring's blocks run, as the backend reads it at load and hands to each ring's
// launch (kquant_ring.cuh RingShape::flags).
struct RingFlags {
  int in_flight = kRingTilesInFlight;  // tiles a block keeps in flight (0: as many as it has stages)
  // Its inputs staged (a norm-fused ring: gate/up, q/k/v) or copied (a long residual ring) by the
  // consumer warps alone, the producer warp going on to its tiles (NOTES v42;
  // RUNAHEAD_CUDA_RING_STAGE=0: every warp takes a part and waits for the others; =consumers:
  // the norm-fused rings' alone, to measure).
  bool consumers_stage = true;
  // With consumers_stage: the producer warp, which then reads weights alone, does not wait for
  // the kernel before (NOTES v42; RUNAHEAD_CUDA_RING_PRODUCER=0: it waits, to measure).
  bool producer_unwaited = true;
  RingPrefetch next;  // the next ring's first bytes, this launch's own (none by default)
};
// Whether this device runs the rings (bulk copies: compute capability 9.0 or more).
bool rings_run_here();

// rmsnorm_qkv_rope.cu — for each token t at position p = *pos + t:
//   h = rmsnorm(x[t]) * norm;  [q | k | v] = h W^T + bias;  with q/k norms (Qwen3) each q head
//   = rmsnorm(q head) * q_norm and each k head = rmsnorm(k head) * k_norm;  rotate q and k by
//   RoPE(p);  q_out[t] = q;  k_cache[p] = k;  v_cache[p] = v.  `ring`: one token's K-quant or
//   Q8_0 q/k/v through the bulk-copy ring (KqRing; qkv_ring_applies says whether it would).
// W: [(heads + 2 kv_heads) * head_dim, H] (q rows, then k, then v); rope_cos/sin: [capacity, head_dim / 2].
// Without q/k norms one kernel does it all; with them the projection goes to `qkv` and a
// second kernel (bias_rope_append's) normalises each head, rotates and appends.
struct QkvRope {
  const void* w = nullptr;
  DType dtype = DType::BF16;
  const void* scale = nullptr;  // as matvec_residual_add's `scale`
  int q6_from = 0;  // a K-quant matrix with both Q4_K and Q6_K rows (kquant.cuh): its first Q6_K row
  const float* bias = nullptr;  // [(heads + 2 kv_heads) * head_dim] or null
  const float* norm = nullptr;  // [H]
  const float* q_norm = nullptr;  // [head_dim] or null (then k_norm is null too)
  const float* k_norm = nullptr;  // [head_dim]
  float* qkv = nullptr;  // [n, (heads + 2 kv_heads) * head_dim] scratch; only with q/k norms
  float eps = 1e-6f;
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
  int hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float* k_cache = nullptr;  // this layer's [capacity, kv_heads * head_dim]
  float* v_cache = nullptr;
  Q8Scratch q8;  // a Q8_0 or K-quant matrix's quantized inputs
  RingFlags ring_flags;  // its ring's
};
void rmsnorm_qkv_rope_append(const QkvRope& a, const float* x, int n, const int* pos, float* q_out,
                             int sms, cudaStream_t stream, KqRing ring = KqRing::Off);
bool qkv_ring_applies(const QkvRope& a, KqRing ring, int sms);
// The first `bytes` (rounded to whole tiles) that one token's q/k/v ring would read, or none
// where no ring applies (RingPrefetch; likewise residual_ring_prefix, gate_up_ring_prefix).
RingPrefetch qkv_ring_prefix(const QkvRope& a, KqRing ring, int sms, size_t bytes);

// attention.cu — out[t, h] = softmax(q[t, h] . K[0 : p+1]^T / sqrt(head_dim)) V[0 : p+1]
// with p = *pos + t and K, V the cache rows of kv head h / (heads / kv_heads). Split-K:
// `splits` blocks per (token, head) each take a slice of the positions; with `cluster` they
// are a thread block cluster and merge the slices through its shared memory (Hopper;
// attention_cluster_fits), else the last block to finish merges them through `partial`.
// q, out: [n, heads * head_dim].
constexpr int kMaxAttentionCluster = 16;  // blocks of a cluster (beyond the portable 8)
struct DecodeAttention {
  int heads = 0, kv_heads = 0, head_dim = 0, capacity = 0, splits = 0;
  bool cluster = false;
  // With `cluster`: each split stores its partial into block 0's shared memory and leaves (one
  // cluster barrier); false: block 0 loads the other splits' partials from theirs (two).
  bool push = false;
  // With `push`: the stores are asynchronous, counted in bytes on a barrier of block 0's, which
  // waits for them alone; the other blocks leave without a fence or a cluster barrier.
  bool counted = false;
  // With `counted` (head_dim a multiple of 32): the merging block's first warp weighs the
  // splits, a lane each, and the others wait for it at a barrier (else every thread weighs them
  // all itself).
  bool weigh_by_warp = false;
  const float* k_cache = nullptr;  // this layer's [capacity, kv_heads * head_dim]
  const float* v_cache = nullptr;
  float* partial = nullptr;  // attention_partial_floats(...)
  int* counters = nullptr;   // [kMaxVecTokens * heads], zero before the first launch
  // When set (head_dim a multiple of 32): out is also written quantized per 32 as
  // quantize_inputs_q8 would (the same bits), so a Q8_0 or K-quant o_proj needs no launch of its own.
  Q8Scratch q8{};
};
int attention_splits(int heads, int sms);
// Whether clusters of `splits` attention blocks run on this device (with DecodeAttention::push
// and ::counted).
bool attention_cluster_fits(int splits, bool push = false, bool counted = false);
size_t attention_partial_floats(int heads, int head_dim, int splits);
void attention_decode(const DecodeAttention& a, const float* q, int n, const int* pos, float* out,
                      cudaStream_t stream);

// matvec_residual.cu — x[t, :] += in[t, :] W^T   W: [rows, K], in: [n, K], x: [n, rows]
// (the attention output projection and the MLP down projection). Here and below, `scale` is
// an F8_E4M3 matrix's f32 scale per row (model/fp8.h), a Q8_0 matrix's f16 block scales
// ([rows, K / 32]; the matrix itself is then its int8 weights, [rows, K]: q8_0.cu), a K-quant
// matrix's Q6_K rows (dtype Q4_K; the matrix itself is its Q4_K rows: kquant.cuh), else null.
// `q8`: a Q8_0 or K-quant matrix's quantized inputs (here and below); `quantized`: q8 already
// holds `in` quantized (written by the op before; with its pair-planar copy where q8.planar is
// set and one token's Q4_K rows read it), else this quantizes it first.
// `tuning`: the ring's warps a row (1, 2, 4, 8: wherever two stages of it fit) and whether it
// goes as for long matrices (1 yes, -1 no: matvec_residual.cu residual_ring), and the long
// matrices' stages at most, to measure; 0: its rule.
struct RingTuning {
  int split = 0, long_rows = 0;
  int stages = 0;      // the long matrices' ring stages at most (0: its rule, 2)
  int warp_split = 0;  // where no ring runs: warps a unit of the per-warp kernel (0: gemv_split's rule)
  RingFlags flags;  // the rings' (consumers_stage: the long matrices' inputs copied by the consumers)
  // Where this launch quantizes its inputs first (down; o_proj too where attention's merge does
  // not, RUNAHEAD_CUDA_FUSED_Q8=0 or head dims not a multiple of 32: unmeasured there), the
  // quantize lets this matrix's kernel launch before its own wait, so that a ring's producers ask
  // for their tiles while the kernel before the quantize (gate/up) still runs: 0 by its rule,
  // where the ring's rows are not long (the 1.5B's down, not the 7B's: NOTES v43); 1 always, -1
  // never (RUNAHEAD_CUDA_QUANTIZE_EARLY=1 / 0, to measure).
  int quantize_early = 0;
};
void matvec_residual_add(const void* w, DType dtype, const void* scale, int rows, int K, const float* in, int n,
                         float* x, const Q8Scratch& q8, int sms, cudaStream_t stream, bool quantized = false,
                         KqRing ring = KqRing::Off, RingTuning tuning = {}, int* ring_cursor = nullptr);
// Whether one token's matvec_residual_add of that matrix goes through the bulk-copy ring
// (Q4_K rows of one format or Q8_0 rows; ring not Off; a device with bulk copies).
bool residual_ring_applies(const void* w, DType dtype, const void* scale, int rows, int K, KqRing ring,
                           RingTuning tuning = {});
RingPrefetch residual_ring_prefix(const void* w, DType dtype, const void* scale, int rows, int K, KqRing ring,
                                  RingTuning tuning, size_t bytes);
// Whether one token's quantize launch before that matrix's lets it launch before its own wait
// (RingTuning::quantize_early).
bool residual_quantizes_early(const void* w, DType dtype, const void* scale, int rows, int K, KqRing ring,
                              RingTuning tuning = {});

// gate_up_swiglu.cu — act[t, j] = silu(g) * u with g = rmsnorm(x[t]) * norm . Wg[j],
// u = ... . Wu[j]   w_gate_up: [2I, H], Wg its first I rows, Wu the rest; x: [n, H], act: [n, I]
// `ring_cursor` (here and in matvec_residual_add; two ints, zero before the first launch, left
// so by each): where the ring runs, its blocks take their later tiles as they free stages
// (kquant_ring.cuh RingShape::cursor); a pair for this launch alone, since the next kernel's
// blocks start before this one ends.
void rmsnorm_gate_up_swiglu(const void* w_gate_up, DType dtype, const void* scale, const float* norm, float eps,
                            int H, int I, const float* x, int n, float* act, const Q8Scratch& q8, int sms,
                            cudaStream_t stream, KqRing ring = KqRing::Auto, int* ring_cursor = nullptr,
                            const RingFlags& ring_flags = {});
bool gate_up_ring_applies(const void* w_gate_up, DType dtype, const void* scale, int H, int I, KqRing ring, int sms);
RingPrefetch gate_up_ring_prefix(const void* w_gate_up, DType dtype, const void* scale, int H, int I, KqRing ring,
                                 int sms, size_t bytes);

// lm_head_argmax.cu — logits[t, :] = rmsnorm(x[t]) * norm . W^T and tokens[t] = argmax (first
// on ties) for t < n   W: [V, H], x: [n, H], logits: [n, V]; then `end`.
// `partial` holds 2 * n * lm_head_blocks(...) floats; `counter` one int, zero at first.
struct LmHead {
  const void* w = nullptr;
  DType dtype = DType::BF16;
  const void* scale = nullptr;  // as matvec_residual_add's `scale`
  const float* norm = nullptr;
  float eps = 1e-6f;
  int hidden = 0, vocab = 0;
  float* partial = nullptr;
  int* counter = nullptr;
  // Zero before the first launch (each launch leaves it so): where set, the blocks take the
  // vocabulary's rows as they finish the ones before (block_gemv's cursor) instead of in turn.
  int* cursor = nullptr;
  Q8Scratch q8;
};
int lm_head_blocks(int vocab, int sms);
void rmsnorm_lm_head_argmax(const LmHead& a, const float* x, int n, float* logits, const StepEnd& end,
                            int sms, cudaStream_t stream);

// Moves *pos on by `advance` (a step that needs no logits).
void advance_position(int* pos, int advance, cudaStream_t stream);

// sampling.cu — token = a draw from softmax(logits / temperature) restricted to the top_k
// largest logits, then to the smallest most-likely set with mass >= top_p; then `end`
// with n_out = 1. Parameters live on the device so one captured graph serves every request.
struct SamplingState {
  float temperature;
  int top_k;
  float top_p;
  unsigned long long seed;
  unsigned long long draws;  // advanced by every draw; the random stream's counter
};
void sample_token(const float* logits, int V, SamplingState* state, const StepEnd& end, cudaStream_t stream);

// prefill.cu — the tensor-core path for long prompts (bf16 weights only).
// h[t, :] = bf16(rmsnorm(x[t]) * norm)   x: [n, H], h: [n, H]
void rmsnorm_to_bf16(const float* x, const float* norm, float eps, int n, int H, void* h, cudaStream_t stream);
// c[t, r] (+)= a[t, :] . W[r, :]   a: [n, K] bf16, W: [rows, K] bf16, c: [n, rows] f32;
// accumulate adds to c instead of overwriting it. K must be a multiple of 8, rows of 2.
void gemm_bf16(const void* a, const void* w, int n, int rows, int K, float* c, bool accumulate,
               cudaStream_t stream);
// As gemm_bf16, written as bf16 (no accumulate): c: [n, rows] bf16.
void gemm_bf16_to_bf16(const void* a, const void* w, int n, int rows, int K, void* c, cudaStream_t stream);
// For each token t at p = *pos + t: qkv[t] += bias; the q/k norms of each head when `a` has
// them; RoPE on its q and k parts; q_out[t] = q, k_cache[p] = k, v_cache[p] = v.
// qkv: [n, (heads + 2 kv_heads) * head_dim]
void bias_rope_append(const QkvRope& a, const float* qkv, int n, const int* pos, float* q_out,
                      cudaStream_t stream);
// act[t, j] = bf16(silu(gu[t, j]) * gu[t, I + j])   gu: [n, 2I] bf16, act: [n, I] bf16
void swiglu_to_bf16(const void* gu, int n, int I, void* act, cudaStream_t stream);
// out[t, :] = bf16(in[t, :])
void to_bf16(const float* in, size_t count, void* out, cudaStream_t stream);

// fp8.cu — the F8_E4M3 matrices (model/fp8.h). quantize: each row of w (`rows` x K of
// dtype) to q with its scale, the bytes model/fp8.h's quantize_fp8_row gives; dequantize:
// out = bf16(q[r, k] * scale[r]), for the tensor-core prefill.
void quantize_fp8_rows(const void* w, DType dtype, int rows, int K, void* q, float* scale, cudaStream_t stream);
void dequantize_fp8_rows(const void* q, const float* scale, int rows, int K, void* out, cudaStream_t stream);

// q8_0.cu — Q8_0 matrices as the matrix-vector ops read them: `blocks` (rows of K / 32 ggml
// blocks of 34 bytes, model/quant_format.h) split into their int8 weights q ([rows, K]) and
// f16 scales d ([rows, K / 32]); and widened back to bf16 (bf16(d * q)) a matrix at a time for
// the tensor-core prefill.
void split_q8_0_blocks(const void* blocks, int rows, int K, void* q, void* d, cudaStream_t stream);
void dequantize_q8_0_rows(const void* q, const void* d, int rows, int K, void* out, cudaStream_t stream);

// kquant.cu — K-quant matrices (kquant.cuh). pack: `rows` rows of ggml Q4_K or Q6_K blocks
// (`blocks`, on the device; q6 says which) regrouped into `out`, that part's rows as the
// kernels read them; dequantize: the rows [0, rows) of a K-quant matrix (Q4_K rows at q4, Q6_K
// rows from q6_from on at q6) widened to bf16, for the tensor-core prefill.
// The bytes of a Q4_K and of a Q6_K row of K weights as the kernels read them (kquant.cuh).
__host__ __device__ constexpr size_t q4k_row_bytes(int K) { return size_t(K) / 2 + size_t(K) / 16; }
__host__ __device__ constexpr size_t q6k_row_bytes(int K) {
  return (size_t(K) / 2 + size_t(K) / 4 + size_t(K) / 16 + size_t(K) / 128 + 15) / 16 * 16;
}

// The first Q6_K row of a K-quant matrix of `rows` rows: 0 without Q4_K rows, `rows` without
// Q6_K ones, else `mixed` (a fused q/k/v whose v is Q6_K).
__host__ __device__ constexpr int kq_q6_from(const void* q4, const void* q6, int rows, int mixed) {
  return !q4 ? 0 : !q6 ? rows : mixed;
}

void pack_kquant_rows(const void* blocks, bool q6, int rows, int K, void* out, cudaStream_t stream);
void dequantize_kquant_rows(const void* q4, const void* q6, int q6_from, int rows, int K, void* out,
                            cudaStream_t stream);
// Causal attention of n new tokens over the cache: as attention_decode for any n.
// out: [n, heads * head_dim] f32.
void attention_prefill(const DecodeAttention& a, const float* q, int n, const int* pos, float* out,
                       cudaStream_t stream);

// Which implementation gemm_bf16 runs: "cublasLt" (the build found it and
// RUNAHEAD_CUDA_CUBLASLT is not 0; a shape it has no algorithm for still runs ours) or "mma.sync".
const char* gemm_bf16_impl();

}  // namespace runahead::cuda
