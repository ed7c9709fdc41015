// Bad models, as data: each case copies a good fixture (test/fixtures/models/<model>)
// into a temp folder, corrupts it with the named steps of mutations.ts, and says
// what the user must be told. Adding a case means adding a line here.
//
//   model    the fixture (default qwen2-tied-bf16)
//   steps    [mutation, ...args], applied in order; paths relative to the model folder
//   options  load options for the engine (merged over the suite's defaults)
//   path     appended to the model folder's path (a NUL byte)
//   expect   code: regex of the error code (default model_error)
//            names: text the message must contain (the file, or the option)
//            field: regex the error's `field` must match (absent: not checked)
//            capped: true for an option the engine caps instead of refusing: the load
//            succeeds, a report warning names the option, and a generation completes
//   server   what the server's status must say: state regex (default error) and
//            names (default expect.names); false where the server cannot be
//            driven into it (load options the server never sends)
import type { Step } from './mutations';

export interface BadModelCase {
  name: string;
  model?: 'qwen2-tied-bf16' | 'llama-f32' | 'qwen2-untied-f16';
  steps?: Step[];
  options?: Record<string, unknown>;
  path?: string;
  expect: { code?: string; names: string; field?: string; capped?: boolean };
  server?: { state?: string; names?: string } | false;
}

const C = 'config.json';
const ST = 'model.safetensors';
const TOK = 'tokenizer.json';
const INDEX = 'model.safetensors.index.json';
const SHARDED = 'qwen2-untied-f16' as const;
const MAX_INT = 2 ** 31 - 1;

export const cases: BadModelCase[] = [
  // config.json is not a readable JSON object
  { name: 'config.json is a FIFO', steps: [['fifo', C]], expect: { names: C } },
  { name: 'config.json is a symlink to /dev/zero', steps: [['symlink', C, '/dev/zero']], expect: { names: C } },
  { name: 'config.json is a directory', steps: [['directory', C]], expect: { names: C } },
  { name: 'config.json is a symlink loop', steps: [['symlink', C, C]], expect: { names: C } },
  { name: 'config.json is missing', steps: [['remove', C]], expect: { names: C } },
  { name: 'config.json is empty', steps: [['write', C, '']], expect: { names: C } },
  { name: 'config.json is invalid JSON', steps: [['write', C, '{"vocab_size": 512,']], expect: { names: C } },
  { name: 'config.json is a JSON array', steps: [['write', C, '[1, 2, 3]']], expect: { names: C } },

  // required sizes: missing, negative, zero, a string, a float, huge
  { name: 'vocab_size missing', steps: [['unset', C, 'vocab_size']], expect: { names: C, field: '^vocab_size$' } },
  { name: 'vocab_size negative', steps: [['set', C, 'vocab_size', -512]], expect: { names: C, field: '^vocab_size$' } },
  { name: 'vocab_size zero', steps: [['set', C, 'vocab_size', 0]], expect: { names: C, field: '^vocab_size$' } },
  { name: 'vocab_size a string', steps: [['set', C, 'vocab_size', '512']], expect: { names: C, field: '^vocab_size$' } },
  { name: 'vocab_size a float', steps: [['set', C, 'vocab_size', 512.5]], expect: { names: C, field: '^vocab_size$' } },
  { name: 'vocab_size 2^31-1', steps: [['set', C, 'vocab_size', MAX_INT]], expect: { names: C, field: '^vocab_size$|embed_tokens' } },
  { name: 'hidden_size missing', steps: [['unset', C, 'hidden_size']], expect: { names: C, field: '^hidden_size$' } },
  { name: 'hidden_size negative', steps: [['set', C, 'hidden_size', -64]], expect: { names: C, field: '^hidden_size$' } },
  { name: 'hidden_size zero', steps: [['set', C, 'hidden_size', 0]], expect: { names: C, field: '^hidden_size$' } },
  { name: 'hidden_size a string', steps: [['set', C, 'hidden_size', '64']], expect: { names: C, field: '^hidden_size$' } },
  { name: 'hidden_size a float', steps: [['set', C, 'hidden_size', 64.5]], expect: { names: C, field: '^hidden_size$' } },
  { name: 'hidden_size 2^30', steps: [['set', C, 'hidden_size', 2 ** 30]], expect: { names: C, field: '^hidden_size$|^head_dim$|weight' } },
  { name: 'intermediate_size missing', steps: [['unset', C, 'intermediate_size']], expect: { names: C, field: '^intermediate_size$' } },
  { name: 'intermediate_size negative', steps: [['set', C, 'intermediate_size', -128]], expect: { names: C, field: '^intermediate_size$' } },
  { name: 'intermediate_size zero', steps: [['set', C, 'intermediate_size', 0]], expect: { names: C, field: '^intermediate_size$' } },
  { name: 'intermediate_size a string', steps: [['set', C, 'intermediate_size', '128']], expect: { names: C, field: '^intermediate_size$' } },
  { name: 'intermediate_size a float', steps: [['set', C, 'intermediate_size', 128.25]], expect: { names: C, field: '^intermediate_size$' } },
  { name: 'intermediate_size 2^31-1', steps: [['set', C, 'intermediate_size', MAX_INT]], expect: { names: C, field: '^intermediate_size$|mlp' } },
  { name: 'num_hidden_layers missing', steps: [['unset', C, 'num_hidden_layers']], expect: { names: C, field: '^num_hidden_layers$' } },
  { name: 'num_hidden_layers negative', steps: [['set', C, 'num_hidden_layers', -2]], expect: { names: C, field: '^num_hidden_layers$' } },
  { name: 'num_hidden_layers zero', steps: [['set', C, 'num_hidden_layers', 0]], expect: { names: C, field: '^num_hidden_layers$' } },
  { name: 'num_hidden_layers a string', steps: [['set', C, 'num_hidden_layers', '2']], expect: { names: C, field: '^num_hidden_layers$' } },
  { name: 'num_hidden_layers a float', steps: [['set', C, 'num_hidden_layers', 2.5]], expect: { names: C, field: '^num_hidden_layers$' } },
  { name: 'num_hidden_layers 10^6', steps: [['set', C, 'num_hidden_layers', 1e6]], expect: { names: C, field: '^num_hidden_layers$|^layer_types$|model\\.layers\\.2\\.' } },
  { name: 'num_hidden_layers 5*10^7', steps: [['set', C, 'num_hidden_layers', 5e7]], expect: { names: C, field: '^num_hidden_layers$|^layer_types$|model\\.layers\\.2\\.' } },
  { name: 'num_hidden_layers 2^31-1', steps: [['set', C, 'num_hidden_layers', MAX_INT]], expect: { names: C, field: '^num_hidden_layers$|^layer_types$|model\\.layers\\.2\\.' } },
  { name: 'num_hidden_layers 10^6 (llama, no layer_types)', model: 'llama-f32', steps: [['set', C, 'num_hidden_layers', 1e6]], expect: { names: C, field: '^num_hidden_layers$|model\\.layers\\.2\\.' } },
  { name: 'num_attention_heads missing', steps: [['unset', C, 'num_attention_heads']], expect: { names: C, field: '^num_attention_heads$' } },
  { name: 'num_attention_heads negative', steps: [['set', C, 'num_attention_heads', -4]], expect: { names: C, field: '^num_attention_heads$' } },
  { name: 'num_attention_heads zero', steps: [['set', C, 'num_attention_heads', 0]], expect: { names: C, field: '^num_attention_heads$' } },
  { name: 'num_attention_heads a string', steps: [['set', C, 'num_attention_heads', '4']], expect: { names: C, field: '^num_attention_heads$' } },
  { name: 'num_attention_heads a float', steps: [['set', C, 'num_attention_heads', 4.5]], expect: { names: C, field: '^num_attention_heads$' } },
  { name: 'num_attention_heads 2^30', steps: [['set', C, 'num_attention_heads', 2 ** 30]], expect: { names: C, field: '^num_attention_heads$|^head_dim$|self_attn' } },
  { name: 'num_key_value_heads not dividing num_attention_heads', steps: [['set', C, 'num_key_value_heads', 3]], expect: { names: C, field: '^num_key_value_heads$' } },
  { name: 'num_key_value_heads zero', steps: [['set', C, 'num_key_value_heads', 0]], expect: { names: C, field: '^num_key_value_heads$' } },
  { name: 'num_key_value_heads negative', steps: [['set', C, 'num_key_value_heads', -2]], expect: { names: C, field: '^num_key_value_heads$' } },
  { name: 'num_key_value_heads a string', steps: [['set', C, 'num_key_value_heads', '2']], expect: { names: C, field: '^num_key_value_heads$' } },
  { name: 'head_dim missing, hidden_size not a multiple of the heads', model: 'llama-f32', steps: [['unset', C, 'head_dim'], ['set', C, 'num_attention_heads', 6], ['set', C, 'num_key_value_heads', 2]], expect: { names: C, field: '^head_dim$' } },
  { name: 'head_dim negative', model: 'llama-f32', steps: [['set', C, 'head_dim', -8]], expect: { names: C, field: '^head_dim$' } },
  { name: 'head_dim zero', model: 'llama-f32', steps: [['set', C, 'head_dim', 0]], expect: { names: C, field: '^head_dim$' } },
  { name: 'head_dim a string', model: 'llama-f32', steps: [['set', C, 'head_dim', '8']], expect: { names: C, field: '^head_dim$' } },
  { name: 'head_dim a float', model: 'llama-f32', steps: [['set', C, 'head_dim', 8.5]], expect: { names: C, field: '^head_dim$' } },
  { name: 'head_dim 2^31-1', model: 'llama-f32', steps: [['set', C, 'head_dim', MAX_INT]], expect: { names: C, field: '^head_dim$|self_attn' } },

  // other config fields
  { name: 'max_position_embeddings 1', steps: [['set', C, 'max_position_embeddings', 1]], expect: { names: C, field: '^max_position_embeddings$' } },
  { name: 'unsupported architecture', steps: [['set', C, 'architectures', ['GPT2LMHeadModel']]], expect: { names: C, field: '^architectures$' } },
  { name: 'architectures missing', steps: [['unset', C, 'architectures']], expect: { names: C, field: '^architectures$' } },
  { name: 'unsupported rope scaling (yarn)', steps: [['set', C, 'rope_parameters', { rope_type: 'yarn', factor: 4.0, rope_theta: 1e6 }]], expect: { names: C, field: '^rope_parameters' } },
  { name: 'unsupported rope scaling (transformers 4 rope_scaling linear)', model: 'llama-f32', steps: [['set', C, 'rope_scaling', { type: 'linear', factor: 2.0 }]], expect: { names: C, field: '^rope_scaling' } },
  { name: 'sliding window attention', steps: [['set', C, 'use_sliding_window', true], ['set', C, 'sliding_window', 16]], expect: { names: C, field: 'sliding_window' } },
  { name: 'sliding window layer type', steps: [['set', C, 'layer_types', ['sliding_attention', 'full_attention']]], expect: { names: C, field: '^layer_types$' } },
  { name: 'rms_norm_eps negative', steps: [['set', C, 'rms_norm_eps', -1e-6]], expect: { names: C, field: '^rms_norm_eps$' } },
  { name: 'eos_token_id past the vocabulary', steps: [['set', C, 'eos_token_id', 100000]], expect: { names: C, field: '^eos_token_id$' } },
  { name: 'untied model without lm_head.weight', steps: [['set', C, 'tie_word_embeddings', false]], expect: { names: ST, field: '^lm_head\\.weight$' } },

  // draft model
  { name: 'draft/config.json is a FIFO', steps: [['copyModel', 'draft'], ['fifo', `draft/${C}`]], expect: { names: `draft/${C}` }, server: { state: 'error|degraded' } },

  // tokenizer.json
  { name: 'tokenizer.json is a FIFO', steps: [['fifo', TOK]], expect: { names: TOK } },
  { name: 'tokenizer.json is a symlink to /dev/zero', steps: [['symlink', TOK, '/dev/zero']], expect: { names: TOK } },
  { name: 'tokenizer.json is invalid JSON', steps: [['write', TOK, '{"model": {"vocab": {"a": 1}']], expect: { names: TOK } },
  { name: 'tokenizer.json without model.vocab', steps: [['unset', TOK, 'model/vocab']], expect: { names: TOK, field: 'model\\.vocab' } },
  { name: 'tokenizer.json ids past vocab_size', steps: [['set', TOK, 'model/vocab/Ċ', 100000]], expect: { names: TOK, field: 'vocab' } },

  // model.safetensors
  { name: 'model.safetensors missing', steps: [['remove', ST]], expect: { names: ST } },
  { name: 'model.safetensors empty', steps: [['write', ST, '']], expect: { names: ST, field: '^header$' } },
  { name: 'model.safetensors truncated', steps: [['truncate', ST, 0.5]], expect: { names: ST, field: 'weight|bias' } },
  { name: 'model.safetensors truncated in the header', steps: [['truncate', ST, 0.005]], expect: { names: ST, field: '^header$' } },
  { name: 'model.safetensors is a FIFO', steps: [['fifo', ST]], expect: { names: ST } },
  { name: 'model.safetensors is a symlink to /dev/zero', steps: [['symlink', ST, '/dev/zero']], expect: { names: ST } },
  { name: 'header length past the end of the file', steps: [['headerLength', ST, '300000']], expect: { names: ST, field: '^header$' } },
  { name: 'header length 2^64-1', steps: [['headerLength', ST, '18446744073709551615']], expect: { names: ST, field: '^header$' } },
  { name: 'header length shorter than the header', steps: [['headerLength', ST, '100']], expect: { names: ST, field: '^header$' } },
  { name: 'header not JSON', steps: [['headerText', ST, 'this is not json']], expect: { names: ST, field: '^header$' } },
  { name: 'dtype unknown', steps: [['tensorField', ST, 'model.norm.weight/dtype', 'Q7']], expect: { names: ST, field: '^model\\.norm\\.weight$' } },
  { name: 'shape mismatch vs config (transposed)', steps: [['tensorField', ST, 'model.layers.0.mlp.down_proj.weight/shape', [128, 64]]], expect: { names: ST, field: '^model\\.layers\\.0\\.mlp\\.down_proj\\.weight$' } },
  { name: 'shape disagrees with its byte count', steps: [['tensorField', ST, 'model.norm.weight/shape', [640]]], expect: { names: ST, field: '^model\\.norm\\.weight$' } },
  { name: 'offsets past the end of the data', steps: [['tensorField', ST, 'model.norm.weight/data_offsets', [214016, 9214144]]], expect: { names: ST, field: '^model\\.norm\\.weight$' } },
  { name: 'offsets reversed', steps: [['tensorField', ST, 'model.norm.weight/data_offsets', [214144, 214016]]], expect: { names: ST, field: '^model\\.norm\\.weight$' } },
  { name: 'overlapping tensors', steps: [['overlap', ST, 'model.layers.1.input_layernorm.weight', 'model.layers.0.input_layernorm.weight']], expect: { names: ST, field: 'input_layernorm\\.weight$' } },
  { name: 'tensor missing', steps: [['dropTensor', ST, 'model.norm.weight']], expect: { names: ST, field: '^model\\.norm\\.weight$' } },
  { name: 'NaN weights', steps: [['poison', ST, 'model.layers.1.mlp.down_proj.weight', 'nan']], expect: { names: ST, field: '^model\\.layers\\.1\\.mlp\\.down_proj\\.weight$' } },
  { name: 'Inf weights', steps: [['poison', ST, 'model.layers.0.self_attn.q_proj.weight', 'inf']], expect: { names: ST, field: '^model\\.layers\\.0\\.self_attn\\.q_proj\\.weight$' } },
  { name: 'NaN weights (f32)', model: 'llama-f32', steps: [['poison', ST, 'lm_head.weight', 'nan']], expect: { names: ST, field: '^lm_head\\.weight$' } },

  // sharded: the index and its shards
  { name: 'index.json points outside the folder', model: SHARDED, steps: [['copyOutside', 'model-00003-of-00003.safetensors', 'outside.safetensors'], ['set', INDEX, 'weight_map/lm_head.weight', '../outside.safetensors']], expect: { names: INDEX, field: 'lm_head\\.weight|weight_map' } },
  { name: 'index.json points at an absolute path', model: SHARDED, steps: [['set', INDEX, 'weight_map/lm_head.weight', '/dev/zero']], expect: { names: INDEX, field: 'lm_head\\.weight|weight_map' } },
  { name: 'index.json points at a missing shard', model: SHARDED, steps: [['remove', 'model-00002-of-00003.safetensors']], expect: { names: 'model-00002-of-00003.safetensors' } },
  { name: 'a shard is a FIFO', model: SHARDED, steps: [['fifo', 'model-00003-of-00003.safetensors']], expect: { names: 'model-00003-of-00003.safetensors' } },
  { name: 'index.json is invalid JSON', model: SHARDED, steps: [['write', INDEX, '{"weight_map": ']], expect: { names: INDEX } },
  { name: 'index.json maps a tensor to a shard that lacks it', model: SHARDED, steps: [['set', INDEX, 'weight_map/model.norm.weight', 'model-00003-of-00003.safetensors']], expect: { names: 'safetensors', field: 'model\\.norm\\.weight' } },

  // load options (the server never sends these)
  { name: 'unknown load option speculaton', options: { speculaton: 'lookup' }, expect: { code: 'bad_request', names: 'speculaton', field: 'speculaton' }, server: false },
  // Capped at the model's maximum and at the CPUs the process may use, with a warning (issue 18).
  { name: 'context_length 2^31-1', options: { context_length: MAX_INT }, expect: { names: 'context_length', capped: true }, server: false },
  { name: 'threads 1024', options: { threads: 1024 }, expect: { names: 'threads', capped: true }, server: false },
  { name: 'max_draft 1000', options: { max_draft: 1000 }, expect: { code: 'bad_request', names: 'max_draft', field: 'max_draft' }, server: false },

  // the model path itself
  { name: 'model path with a NUL byte', path: '\u0000/../x', expect: { code: 'bad_request|model_error', names: 'NUL', field: '^model$' }, server: { names: 'modelPath' } },
];
