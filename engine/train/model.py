"""The shapes of the embedded default bundle, the Qwen2 decoder layer written out,
and the MTP head of engine/MODEL_FORMAT.md.

Target and draft are plain transformers Qwen2ForCausalLM, so the engine loads
them exactly like a real Qwen2.5-Coder. The MTP head has no transformers class:
its forward is written here from the format's math, and `decoder_layer` is
checked against transformers' own layers (train.py smoke) so the two agree.
"""
import json
import os

import torch
import torch.nn.functional as F
from torch import nn

# Why these shapes: see README.md. Shipped in Q8_0 (1.0625 bytes a weight): target 18.4 MB, MTP 1.4 MB, draft 2.7 MB.
VOCAB = 16384
SEQ = 2048
ROPE_THETA = 10000.0
RMS_EPS = 1e-6
TARGET = dict(hidden_size=384, num_hidden_layers=7, num_attention_heads=6, num_key_value_heads=2, intermediate_size=1024)
DRAFT = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, intermediate_size=384)
MTP_INTERMEDIATE = 512
Q8_BLOCK = 32
SMOKE_VOCAB = 1024
SMOKE_TARGET = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128)
SMOKE_DRAFT = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, intermediate_size=64)
RUNAHEAD_KEY = {"fim_orders": ["psm", "spm"], "fim_order": "spm", "repo_level": True, "format_version": 1}


def make_qwen2(shape, vocab, eos_id):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    config = Qwen2Config(vocab_size=vocab, max_position_embeddings=SEQ, rms_norm_eps=RMS_EPS, rope_theta=ROPE_THETA,
                         tie_word_embeddings=True, use_sliding_window=False, bos_token_id=eos_id, eos_token_id=eos_id,
                         pad_token_id=eos_id, initializer_range=0.02, **shape)
    return Qwen2ForCausalLM(config)


def save_qwen2(model, folder, tokenizer_folder, fim_order="spm"):
    """A Hugging Face folder: bf16 safetensors, config with the runahead key, generation config, tokenizer."""
    import shutil
    from transformers import GenerationConfig
    os.makedirs(folder, exist_ok=True)
    eos = model.config.eos_token_id
    copy = type(model)(model.config)
    copy.load_state_dict(model.state_dict())
    copy.generation_config = GenerationConfig(bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)
    copy.to(torch.bfloat16).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.abspath(tokenizer_folder) != os.path.abspath(folder):
            shutil.copy(os.path.join(tokenizer_folder, name), os.path.join(folder, name))
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    config["runahead"] = {**RUNAHEAD_KEY, "fim_order": fim_order}
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def load_qwen2(folder, dtype=torch.float32):
    """A saved folder, bf16 or Q8_0 (then dequantised: the model computes with exactly the shipped values)."""
    from safetensors import safe_open
    from transformers import Qwen2Config, Qwen2ForCausalLM
    path = os.path.join(folder, "model.safetensors")
    with safe_open(path, "pt") as f:
        quantized = any(k.endswith("_scale") for k in f.keys())
    if not quantized:
        return Qwen2ForCausalLM.from_pretrained(folder, dtype=dtype)
    model = Qwen2ForCausalLM(Qwen2Config.from_pretrained(folder))
    missing, unexpected = model.load_state_dict(load_q8_0(path), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    model.tie_weights()
    return model.to(dtype)


def rms_norm(x, weight, eps=RMS_EPS):
    """weight * x / rms(x), computed in float32 like Qwen2RMSNorm."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def rope(x, pos, theta=ROPE_THETA):
    """Rotary embedding, Qwen2's half-split layout. x [B, heads, T, hd], pos [T]."""
    hd = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd)
    freqs = pos.float()[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def decoder_layer(layer, x, pos, heads, kv_heads, past=None, mask=None):
    """One Qwen2 decoder layer. x [B, T, H]; pos [T]; past: earlier (k, v) blocks this
    layer attends to as well, each [B, kv_heads, T, hd]; mask [T, keys] (True = attend)
    or None for causal. Returns (x', (k, v)) with this call's keys and values."""
    B, T, H = x.shape
    attn = layer.self_attn
    h = rms_norm(x, layer.input_layernorm.weight)
    q = attn.q_proj(h).view(B, T, heads, -1).transpose(1, 2)
    k = attn.k_proj(h).view(B, T, kv_heads, -1).transpose(1, 2)
    v = attn.v_proj(h).view(B, T, kv_heads, -1).transpose(1, 2)
    q, k = rope(q, pos), rope(k, pos)
    keys = torch.cat([kk for kk, _ in past or []] + [k], 2)
    values = torch.cat([vv for _, vv in past or []] + [v], 2)
    rep = heads // kv_heads
    a = F.scaled_dot_product_attention(q, keys.repeat_interleave(rep, 1), values.repeat_interleave(rep, 1),
                                       attn_mask=mask, is_causal=mask is None)
    x = x + attn.o_proj(a.transpose(1, 2).reshape(B, T, -1))
    h = rms_norm(x, layer.post_attention_layernorm.weight)
    mlp = layer.mlp
    return x + mlp.down_proj(F.silu(mlp.gate_proj(h)) * mlp.up_proj(h)), (k, v)


class Norm(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))


class Attention(nn.Module):
    def __init__(self, hidden, heads, kv_heads):
        super().__init__()
        hd = hidden // heads
        self.q_proj = nn.Linear(hidden, heads * hd, bias=True)
        self.k_proj = nn.Linear(hidden, kv_heads * hd, bias=True)
        self.v_proj = nn.Linear(hidden, kv_heads * hd, bias=True)
        self.o_proj = nn.Linear(heads * hd, hidden, bias=False)


class MLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)


class Layer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, intermediate):
        super().__init__()
        self.input_layernorm = Norm(hidden)
        self.self_attn = Attention(hidden, heads, kv_heads)
        self.post_attention_layernorm = Norm(hidden)
        self.mlp = MLP(hidden, intermediate)


class MTPHead(nn.Module):
    """Parameter names are MODEL_FORMAT.md's without the `mtp.` prefix."""

    def __init__(self, config, intermediate):
        super().__init__()
        H = config.hidden_size
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.enorm, self.hnorm, self.final_norm = Norm(H), Norm(H), Norm(H)
        self.eh_proj = nn.Linear(2 * H, H, bias=False)
        self.layer = Layer(H, self.heads, self.kv_heads, intermediate)

    def init_from(self, target):
        """Start from the target's last layer (attention whole, the MLP's first channels): it already
        speaks the target's hidden space, so the head trains in seconds rather than minutes."""
        src = target.model.layers[-1]
        n = self.layer.mlp.gate_proj.out_features
        with torch.no_grad():
            for name, p in self.layer.named_parameters():
                s = src.get_parameter(name)
                if name.startswith("mlp.down_proj"):
                    p.copy_(s[:, :n])
                elif name.startswith("mlp."):
                    p.copy_(s[:n])
                else:
                    p.copy_(s)
            H = self.eh_proj.out_features
            self.eh_proj.weight.zero_()
            self.eh_proj.weight[:, :H] += 0.5 * torch.eye(H, device=p.device)
            self.eh_proj.weight[:, H:] += 0.5 * torch.eye(H, device=p.device)

    def unrolled(self, embed, hidden, tokens, depth):
        """Depth-unrolled forward over whole sequences, exactly as chained drafting sees it.

        hidden [B, T, H]: the target's last-layer output before its final norm, at every index t.
        tokens [B, T]. At depth d the head at index t reads the embedding of token t+d and the
        previous depth's h' (the target's h_t at depth 1), sits at RoPE position t+d and predicts
        token t+d+1. It attends to depth-1 keys of indices <= t (the KV cache filled from verified
        target states) and to its own chain's earlier depths at index t. Returns the normed outputs
        per depth, each [B, T, H]; entries with t+d > T-1 are meaningless."""
        B, T, _ = hidden.shape
        ar = torch.arange(T, device=hidden.device)
        causal = ar[None, :] <= ar[:, None]
        diagonal = torch.eye(T, dtype=torch.bool, device=hidden.device)
        past, outs, h = [], [], hidden
        for d in range(1, depth + 1):
            e = embed(tokens[:, (ar + d).clamp(max=T - 1)])
            x = self.eh_proj(torch.cat([rms_norm(e, self.enorm.weight), rms_norm(h, self.hnorm.weight)], -1))
            mask = None if d == 1 else torch.cat([causal] + [diagonal] * (d - 1), 1)
            h, kv = decoder_layer(self.layer, x, ar + d, self.heads, self.kv_heads, past, mask)
            past.append(kv)
            outs.append(rms_norm(h, self.final_norm.weight))
        return outs


def save_mtp(head, path):
    from safetensors.torch import save_file
    tensors = {f"mtp.{k}": v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in head.state_dict().items()}
    save_file(tensors, path, metadata={"format": "runahead-mtp", "version": "1"})


def load_mtp(path, config):
    tensors = load_q8_0(path)
    head = MTPHead(config, tensors["mtp.layer.mlp.gate_proj.weight"].shape[0])
    head.load_state_dict({k[len("mtp."):]: v.float() for k, v in tensors.items()})
    return head


class PreNormHidden:
    """Captures the input of the target's final norm: the last layer's output, the MTP head's h_t."""

    def __init__(self, model):
        self.value = None
        model.model.norm.register_forward_pre_hook(self._hook)

    def _hook(self, module, args):
        self.value = args[0]


def is_quantized(name, tensor):
    """Matrices go to Q8_0 (linear weights and the tied embedding table); norms and biases stay bf16."""
    return tensor.dim() == 2 and name.endswith(".weight") and tensor.shape[1] % Q8_BLOCK == 0


def q8_0(w):
    """llama.cpp's Q8_0 of a [out, in] matrix: per block of 32, d = absmax / 127 (stored f16), q = round(w / d).
    Returns (int8 q [out, in], f16 d [out, in / 32])."""
    blocks = w.detach().float().reshape(w.shape[0], -1, Q8_BLOCK)
    d = (blocks.abs().amax(-1) / 127).half()
    inv = torch.where(d.float() > 0, 1 / d.float(), torch.zeros_like(d.float()))
    q = torch.round(blocks * inv[..., None]).clamp(-127, 127).to(torch.int8)
    return q.reshape(w.shape), d


def dequant_q8_0(q, d):
    return (q.float().reshape(q.shape[0], -1, Q8_BLOCK) * d.float()[..., None]).reshape(q.shape)


@torch.no_grad()
def round_trip_q8_0(module):
    """Replaces every matrix that ships as Q8_0 by its dequantised value (and the rest by bf16's): the module then
    computes with exactly the shipped bytes, so evaluation measures what users run."""
    for name, p in module.named_parameters():
        if is_quantized(name, p):
            p.copy_(dequant_q8_0(*q8_0(p)))
        else:
            p.copy_(p.to(torch.bfloat16).float())
    return module


def save_q8_0(path, tensors, metadata=None):
    """Writes safetensors with MODEL_FORMAT.md's Q8_0 convention: `X.weight` int8 [out, in] plus `X.weight_scale`
    f16 [out, in / 32]; other tensors bf16. tensors: name -> tensor. Tied lm_head is not written."""
    from safetensors.torch import save_file
    out = {}
    for name, t in tensors.items():
        if is_quantized(name, t):
            q, d = q8_0(t)
            out[name], out[name + "_scale"] = q.contiguous().cpu(), d.contiguous().cpu()
        else:
            out[name] = t.detach().to(torch.bfloat16).contiguous().cpu()
    save_file(out, path, metadata=metadata or {"format": "pt"})


def load_q8_0(path):
    """Reads save_q8_0's file back as float tensors (dequantised)."""
    from safetensors.torch import load_file
    raw = load_file(path)
    return {k: dequant_q8_0(v, raw[k + "_scale"]) if k + "_scale" in raw else v.float()
            for k, v in raw.items() if not k.endswith("_scale")}


def ship_q8_0(folder, mtp_path=None):
    """Rewrites a saved folder's model.safetensors (and the MTP head's file) in Q8_0."""
    from safetensors.torch import load_file
    for path, meta in ((os.path.join(folder, "model.safetensors"), {"format": "pt"}),
                       (mtp_path, {"format": "runahead-mtp", "version": "1"})):
        if path and os.path.exists(path):
            tensors = {k: v.float() for k, v in load_file(path).items() if k != "lm_head.weight"}
            save_q8_0(path, tensors, meta)
