"""Trains the embedded default bundle: corpus, tokenizer, target, MTP head, draft, evaluation.

    python3 engine/train/train.py all                 # every stage, in order (GPU)
    python3 engine/train/train.py --smoke all         # every stage on a sliver, tiny shapes, seconds
    python3 engine/train/train.py eval                # one stage; earlier stages' outputs are read back

Stages: corpus tokenizer target mtp draft eval ship. Training stages run a
fixed number of steps (--steps-*), seeded, so a run repeats step for step.
Outputs: engine/models/runahead-coder/ (target, mtp.safetensors, draft/, in
Q8_0 after `ship`), engine/train/logs/ (curves, logs, eval),
engine/train/splits/; --export DIR also tars them there after every stage, in
pieces of at most 15 MB (what a GPU run can bring back).
"""
import argparse
import json
import math
import os
import pickle
import random
import shutil
import subprocess
import sys
import tarfile
import time
import unicodedata

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
import data  # noqa: E402
import model as M  # noqa: E402
import speculation as S  # noqa: E402
from tokenizer import SPECIAL, load_tokenizer, save_tokenizer, train_tokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SEED = 1234
CORPUS_ARCHIVE = ".corpus/corpus.jsonl.xz"
TARGET_BATCH = 64
ALIGNED = 0.75  # share of training windows that start at a chunk's start
SITE_PACKAGE_BYTES = 2_500_000  # the GPU machine's own site-packages: many packages, none dominating
BUNDLE_LIMIT = 24_000_000


class Run:
    """Paths, sizes and lazily built inputs shared by the stages."""

    def __init__(self, args):
        self.args, self.smoke = args, args.smoke
        self.work = args.work or ("/tmp/runahead-smoke" if self.smoke else "/tmp/runahead-train")
        self.model_dir = args.model or (os.path.join(self.work, "runahead-coder") if self.smoke
                                        else os.path.join(ROOT, "engine/models/runahead-coder"))
        self.logs = os.path.join(self.work, "logs") if self.smoke else os.path.join(HERE, "logs")
        self.splits = os.path.join(self.work, "splits") if self.smoke else os.path.join(HERE, "splits")
        self.draft_dirs = {name: os.path.join(self.work, f"draft-{name}") for name in DRAFT_LOSSES}
        self.master = os.path.join(self.work, "bf16")  # the trained weights before Q8_0, kept for the record
        self.baseline = args.baseline
        for d in (self.work, self.logs, self.splits):
            os.makedirs(d, exist_ok=True)
        self.vocab = M.SMOKE_VOCAB if self.smoke else M.VOCAB
        self.target_shape = M.SMOKE_TARGET if self.smoke else M.TARGET
        self.draft_shape = M.SMOKE_DRAFT if self.smoke else M.DRAFT
        self.seq = 128 if self.smoke else M.SEQ
        self.head_seq = 128 if self.smoke else M.SEQ // 2  # MTP and draft distil on shorter windows: same signal, half the time
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self._docs = self._streams = self._tok = None

    def scale(self, batch):
        return 2 if self.smoke else batch

    def docs(self):
        if self._docs is None:
            path = os.path.join(self.work, "docs.pkl")
            if not os.path.exists(path):
                stage_corpus(self)
            with open(path, "rb") as f:
                self._docs = pickle.load(f)
        return self._docs

    def tok(self):
        if self._tok is None:
            self._tok = load_tokenizer(self.model_dir)
        return self._tok

    def eos(self):
        return self.tok().token_to_id("<|endoftext|>")

    def streams(self):
        """(train, held_out, held_out_plain) token streams as int32 tensors on the device."""
        if self._streams is None:
            path = os.path.join(self.work, "streams.npz")
            if not os.path.exists(path):
                train, held = self.docs()
                t0 = time.time()
                stream, starts = data.build_stream(self.tok(), train, SEED, with_starts=True)
                arrays = dict(train=stream, starts=starts,
                              held=data.build_stream(self.tok(), held, SEED + 1),
                              plain=data.build_stream(self.tok(), held, SEED + 2, repeat={}, fim_rate=0.0))
                np.savez(path, **arrays)
                log(f"streams: train {len(arrays['train']) / 1e6:.1f}M tokens, held-out {len(arrays['held']) / 1e6:.2f}M, "
                    f"{time.time() - t0:.0f}s")
            z = np.load(path)
            self._streams = tuple(torch.from_numpy(z[k].astype(np.int32)).to(self.device) for k in ("train", "held", "plain"))
            self.starts = torch.from_numpy(z["starts"]).to(self.device)
        return self._streams

    def export(self):
        """Tars the model folder, both drafts, the bf16 master, logs and splits into --export as pieces of at most
        15 MB (`cat weights.tar.* | tar -x` joins them); logs travel apart so they come back even if weights do not."""
        out = self.args.export
        if not out:
            return
        with tarfile.open(os.path.join(out, "logs.tar"), "w") as t:
            t.add(self.logs, arcname="logs")
            t.add(self.splits, arcname="splits")
        path = os.path.join(self.work, "weights.tar")
        with tarfile.open(path, "w") as t:
            # What comes back is at most ~64 MB in all: the bf16 master (37 MB) stays on the GPU machine.
            for folder, name in [(self.model_dir, "runahead-coder")] + \
                    [(d, f"draft-{n}") for n, d in self.draft_dirs.items()]:
                if os.path.exists(folder):
                    t.add(folder, arcname=name)
        for old in os.listdir(out):
            if old.startswith("weights.tar."):
                os.remove(os.path.join(out, old))
        subprocess.run(["split", "-b", "15M", "-d", path, os.path.join(out, "weights.tar.")], check=True)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def windows(stream, batch, length, gen, starts=None, aligned=ALIGNED):
    """batch random windows of length+1 tokens from a stream (inputs and shifted targets); with starts, that share
    of them begins where a chunk does, so the model sees whole FIM examples from their header, as a prompt is."""
    idx = torch.randint(0, len(stream) - length - 1, (batch,), device=stream.device, generator=gen)
    if starts is not None:
        starts = starts[starts < len(stream) - length - 1]
        pick = starts[torch.randint(0, len(starts), (batch,), device=stream.device, generator=gen)]
        use = torch.rand(batch, device=stream.device, generator=gen) < aligned
        idx = torch.where(use, pick, idx)
    return stream[idx[:, None] + torch.arange(length + 1, device=stream.device)].long()


def autocast(run):
    return torch.autocast(run.device, dtype=torch.bfloat16, enabled=run.device == "cuda")


def train_loop(run, name, module, step_fn, lr, steps, warmup=50):
    """AdamW, warm-up then cosine to 10% over a fixed number of steps. step_fn(step) -> (loss, metrics dict).
    Logs every 20 steps to logs/NAME.jsonl and draws logs/NAME.png. Returns the steps taken."""
    params = [p for p in module.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=run.device == "cuda")
    max_steps = 3 if run.smoke else steps
    start, step, rows = time.time(), 0, []
    while step < max_steps:
        frac = step / max_steps
        scale = min(1.0, (step + 1) / warmup) * (0.1 + 0.45 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr * scale
        loss, metrics = step_fn(step)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 20 == 0 or run.smoke:
            row = {"step": step, "seconds": round(time.time() - start, 1), "lr": lr * scale, "loss": loss.item(),
                   **{k: float(v.detach()) for k, v in metrics.items()}}
            rows.append(row)
            if step % 100 == 0 or run.smoke:
                log(f"{name} " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
        step += 1
    with open(os.path.join(run.logs, f"{name}.jsonl"), "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    plot(run, name, rows)
    log(f"{name}: {step} steps in {time.time() - start:.0f}s")
    return step


def plot(run, name, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = [k for k in rows[0] if k not in ("step", "seconds", "lr")]
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 3.5), squeeze=False)
    for ax, key in zip(axes[0], keys):
        ax.plot([r["step"] for r in rows], [r[key] for r in rows])
        ax.set_xlabel("step")
        ax.set_title(f"{name}: {key}")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(run.logs, f"{name}.png"), dpi=80)
    plt.close(fig)


def stage_corpus(run):
    t0 = time.time()
    corpus.MAX_PACKAGE_BYTES = SITE_PACKAGE_BYTES
    train, held = corpus.load_corpus(os.path.join(ROOT, CORPUS_ARCHIVE), max_packages=30 if run.smoke else None)
    if run.smoke:
        train, held = train[:300], (held or train[300:])[:60]
    corpus.write_splits(train, held, run.splits)
    with open(os.path.join(run.work, "docs.pkl"), "wb") as f:
        pickle.dump((train, held), f)
    size = lambda docs: sum(len(d["text"]) for d in docs) / 1e6  # noqa: E731
    per_language = {lang: (round(size([d for d in train if d["language"] == lang]), 1),
                           round(size([d for d in held if d["language"] == lang]), 1))
                    for lang in sorted({d["language"] for d in train + held})}
    log(f"corpus: train {len(train)} files {size(train):.1f} MB, held-out {len(held)} files {size(held):.1f} MB, "
        f"MB (train, held-out) per language {per_language}, {time.time() - t0:.0f}s")


def stage_tokenizer(run):
    t0 = time.time()
    train, _ = run.docs()
    budget, texts = (2e6 if run.smoke else 50e6), []
    for doc in sorted(train, key=lambda d: corpus.stable_hash(d["path"])):
        texts.append(doc["text"])
        budget -= len(doc["text"])
        if budget <= 0:
            break
    tok = train_tokenizer(texts, run.vocab)
    os.makedirs(run.model_dir, exist_ok=True)
    save_tokenizer(tok, run.model_dir, max_length=4096)
    run._tok = load_tokenizer(run.model_dir)
    assert run._tok.get_vocab_size() == run.vocab, run._tok.get_vocab_size()
    assert [run._tok.token_to_id(s) for s in SPECIAL] == list(range(len(SPECIAL)))
    sample = texts[0][:2000]
    assert run._tok.decode(run._tok.encode(sample).ids) == unicodedata.normalize("NFC", sample), "no round trip"
    chars = sum(len(t) for t in texts[:200])
    tokens = sum(len(e.ids) for e in run._tok.encode_batch(texts[:200]))
    log(f"tokenizer: {run.vocab} ids, {chars / tokens:.2f} chars/token on its training text, {time.time() - t0:.0f}s")


def stage_target(run):
    torch.manual_seed(SEED)
    train, held, _ = run.streams()
    model = M.make_qwen2(run.target_shape, run.vocab, run.eos()).to(run.device)
    log(f"target: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")
    gen = torch.Generator(device=run.device).manual_seed(SEED)
    batch = run.scale(TARGET_BATCH)

    def step(i):
        x = windows(train, batch, run.seq, gen, run.starts)
        with autocast(run):
            logits = model(input_ids=x[:, :-1], use_cache=False).logits
        return F.cross_entropy(logits.float().flatten(0, 1), x[:, 1:].flatten()), {}

    model.train()
    steps = train_loop(run, "target", model, step, lr=2e-3, steps=run.args.steps_target, warmup=100)
    model.eval()
    M.save_qwen2(model, run.model_dir, run.model_dir, run.args.fim_order)
    log(f"target: held-out loss {held_out_loss(run, model, held):.4f} after {steps} steps")


@torch.no_grad()
def held_out_loss(run, model, stream, n=32):
    gen = torch.Generator(device=run.device).manual_seed(SEED + 5)
    x = windows(stream, run.scale(n), run.seq, gen)
    with autocast(run):
        logits = model(input_ids=x[:, :-1], use_cache=False).logits
    return F.cross_entropy(logits.float().flatten(0, 1), x[:, 1:].flatten()).item()


def load_target(run):
    target = M.load_qwen2(run.model_dir).to(run.device).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    return target, M.PreNormHidden(target)


@torch.no_grad()
def check_decoder_layer(run, target, hidden):
    """Our decoder_layer (the MTP head's) must reproduce transformers' Qwen2 layers."""
    x = torch.randint(0, run.vocab, (2, 64), device=run.device)
    target(input_ids=x, use_cache=False)
    cfg = target.config
    h = target.model.embed_tokens(x)
    for layer in target.model.layers:
        h, _ = M.decoder_layer(layer, h, torch.arange(64, device=run.device), cfg.num_attention_heads, cfg.num_key_value_heads)
    err = ((h - hidden.value).norm() / hidden.value.norm()).item()
    log(f"decoder_layer vs transformers Qwen2: relative error {err:.2e}")
    assert err < 1e-3, f"decoder_layer disagrees with transformers: {err}"


def kl(p_logits, q_logits):
    """KL(p || q) per position, float32."""
    logp = F.log_softmax(p_logits.float(), -1)
    return (logp.exp() * (logp - F.log_softmax(q_logits.float(), -1))).sum(-1)


def stage_mtp(run, depth=3):
    torch.manual_seed(SEED)
    train, _, _ = run.streams()
    target, hidden = load_target(run)
    check_decoder_layer(run, target, hidden)
    head = M.MTPHead(target.config, M.MTP_INTERMEDIATE if not run.smoke else 48).to(run.device)
    head.init_from(target)
    gen = torch.Generator(device=run.device).manual_seed(SEED + 1)
    batch, T = run.scale(48), run.head_seq

    def step(i):
        x = windows(train, batch, T, gen, run.starts)[:, :-1]
        with torch.no_grad(), autocast(run):
            t_logits = target(input_ids=x, use_cache=False).logits
        with autocast(run):
            outs = head.unrolled(target.model.embed_tokens, hidden.value.detach(), x, depth)
            losses, agree = [], []
            for d, o in enumerate(outs, 1):
                q = target.lm_head(o[:, : T - d])
                p = t_logits[:, d:]
                losses.append(kl(p, q).mean())
                agree.append((q.argmax(-1) == p.argmax(-1)).float().mean())
        return sum(losses) / depth, {f"top1_d{d}": a for d, a in enumerate(agree, 1)}

    train_loop(run, "mtp", head, step, lr=1e-3, steps=run.args.steps_mtp, warmup=20)
    path = os.path.join(run.model_dir, "mtp.safetensors")
    M.save_mtp(head, path)
    from safetensors import safe_open
    with safe_open(path, "pt") as f:
        assert f.metadata() == {"format": "runahead-mtp", "version": "1"}
        names = set(f.keys())
    expected = {f"mtp.{n}.weight" for n in ("enorm", "hnorm", "eh_proj", "final_norm", "layer.input_layernorm",
                                            "layer.post_attention_layernorm", "layer.self_attn.o_proj")}
    expected |= {f"mtp.layer.self_attn.{p}_proj.{w}" for p in "qkv" for w in ("weight", "bias")}
    expected |= {f"mtp.layer.mlp.{p}_proj.weight" for p in ("gate", "up", "down")}
    assert names == expected, names ^ expected
    log(f"mtp: saved {path} ({os.path.getsize(path) / 1e6:.2f} MB)")


@torch.no_grad()
def sample_target(run, target, stream, batches, batch, prompt, new):
    """The target's own continuations of corpus windows: half greedy, half sampled at temperature 1."""
    gen = torch.Generator(device=run.device).manual_seed(SEED + 2)
    out = []
    for b in range(batches):
        ids = windows(stream, batch, prompt - 1, gen)
        for _ in range(new):
            with autocast(run):
                logits = target(input_ids=ids, logits_to_keep=1, use_cache=False).logits[:, -1].float()
            if b % 2 == 0:
                nxt = logits.argmax(-1)
            else:
                nxt = torch.multinomial(F.softmax(logits, -1), 1, generator=gen)[:, 0]
            ids = torch.cat([ids, nxt[:, None]], 1)
        out.append(ids)
    return torch.cat(out)


DRAFT_LOSSES = ("kl", "kl+tv")


def stage_draft(run):
    """One draft distilled with KL from the target (corpus windows and the target's own continuations), then a copy
    fine-tuned with total variation + 0.1 KL, the loss aimed at acceptance; eval measures both, ship keeps the better."""
    train, _, _ = run.streams()
    target, _ = load_target(run)
    t0 = time.time()
    batches, batch, prompt, new = (2, 4, 16, 16) if run.smoke else (run.args.sample_batches, 256, 128, 256)
    samples = sample_target(run, target, train, batches, batch, prompt, new)
    log(f"draft: {samples.numel() / 1e6:.2f}M tokens sampled from the target in {time.time() - t0:.0f}s")
    torch.manual_seed(SEED)
    draft = M.make_qwen2(run.draft_shape, run.vocab, run.eos()).to(run.device)
    gen = torch.Generator(device=run.device).manual_seed(SEED + 3)
    for loss_name, steps in (("kl", run.args.steps_draft), ("kl+tv", run.args.steps_draft_tv)):
        def step(i):
            if i % 2 == 0:
                x = windows(train, run.scale(64), run.head_seq, gen, run.starts)[:, :-1]
            else:
                x = samples[torch.randint(0, len(samples), (run.scale(128),), device=run.device, generator=gen)]
            with torch.no_grad(), autocast(run):
                p_logits = target(input_ids=x, use_cache=False).logits
            with autocast(run):
                q_logits = draft(input_ids=x, use_cache=False).logits
            p, q = F.softmax(p_logits.float(), -1), F.softmax(q_logits.float(), -1)
            tv = 0.5 * (p - q).abs().sum(-1).mean()
            k = kl(p_logits, q_logits).mean()
            loss = tv + 0.1 * k if loss_name == "kl+tv" else k
            agree = (p_logits.argmax(-1) == q_logits.argmax(-1)).float().mean()
            return loss, {"tv": tv, "kl": k, "top1": agree}

        draft.train()
        train_loop(run, f"draft-{loss_name}", draft, step, lr=3e-3 if loss_name == "kl" else 5e-4, steps=steps,
                   warmup=50 if loss_name == "kl" else 10)
        draft.eval()
        M.save_qwen2(draft, run.draft_dirs[loss_name], run.model_dir, run.args.fim_order)
        run.export()


def left_padded(prompts, pad, device):
    L = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), L), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), L), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, L - len(p):] = torch.tensor(p)
        mask[i, L - len(p):] = 1
    return ids.to(device), mask.to(device)


@torch.no_grad()
def greedy(model, prompts, new, stop, pad, device, batch=100):
    """Greedy continuations (lists of ids, the first stop token included when reached), batched with left padding
    and a KV cache (transformers' generate)."""
    outs, stop_set = [], set(stop.tolist())
    for b in range(0, len(prompts), batch):
        ids, mask = left_padded(prompts[b:b + batch], pad, device)
        gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=0,
                             do_sample=False, eos_token_id=sorted(stop_set) or None, pad_token_id=pad,
                             top_k=None, top_p=None, temperature=None)[:, ids.shape[1]:].tolist()
        for row in gen:
            cut = next((i for i, t in enumerate(row) if t in stop_set), None)
            outs.append(row if cut is None else row[:cut + 1])
    return outs


def fim_prompt(tok, task, order, repo_level=True):
    """The prompt the server builds (server/src/completion/fim.ts): with repo-level context, the workspace folder's
    name and the file's path first; then prefix and suffix in the model's order."""
    enc = lambda s: tok.encode(s, add_special_tokens=False).ids  # noqa: E731
    pre, suf, mid, repo, sep = (tok.token_to_id(s) for s in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>",
                                                             "<|repo_name|>", "<|file_sep|>"))
    head = [repo] + enc(task["package"] + "\n") + [sep] + enc(task["path"] + "\n") if repo_level else []
    if order == "psm":
        return head + [pre] + enc(task["prefix"]) + [suf] + enc(task["suffix"]) + [mid]
    return head + [suf] + enc(task["suffix"]) + [pre] + enc(task["prefix"]) + [mid]


def fim_scores(tok, tasks, completions):
    """Per language and overall: first-line exact match, whole-middle exact match (a line task's completion is cut
    at its first newline: one line was asked), edit similarity, and the share of empty answers."""
    rows = {}
    for task, ids in zip(tasks, completions):
        text = tok.decode([t for t in ids if t >= len(SPECIAL)])
        first = text.split("\n")[0].rstrip()
        whole = first if task["kind"] != "block" else text.rstrip()
        row = (first == task["middle"].split("\n")[0].rstrip(), whole == task["middle"].rstrip(),
               S.edit_similarity(whole, task["middle"].rstrip()), not text.strip())
        for key in (task["language"], "all"):
            rows.setdefault(key, []).append(row)
    return {key: {"first_line_exact": round(float(np.mean([r[0] for r in v])), 4),
                  "exact_match": round(float(np.mean([r[1] for r in v])), 4),
                  "edit_similarity": round(float(np.mean([r[2] for r in v])), 4),
                  "empty": round(float(np.mean([r[3] for r in v])), 4), "tasks": len(v)} for key, v in rows.items()}


@torch.no_grad()
def teacher_forced(run, target, hidden, head, drafts, seqs, depth=8, batch=32):
    """Per sequence: target argmax, each draft's argmax, MTP argmax per depth (lists), right-padded batches."""
    rows = []
    for b in range(0, len(seqs), batch):
        chunk = seqs[b:b + batch]
        L = max(len(s) for s in chunk)
        x = torch.zeros((len(chunk), L), dtype=torch.long)
        for i, s in enumerate(chunk):
            x[i, :len(s)] = torch.tensor(s)
        x = x.to(run.device)
        t_arg = target(input_ids=x, use_cache=False).logits.argmax(-1)
        outs = head.unrolled(target.model.embed_tokens, hidden.value, x, depth)
        m_arg = torch.stack([target.lm_head(o).argmax(-1) for o in outs], 1)  # [B, depth, L]
        d_args = {name: d(input_ids=x, use_cache=False).logits.argmax(-1) for name, d in drafts.items()}
        for i, s in enumerate(chunk):
            n = len(s)
            rows.append({"target": t_arg[i, :n].tolist(), "mtp": m_arg[i, :, :n].tolist(),
                         **{name: a[i, :n].tolist() for name, a in d_args.items()}})
    return rows


def acceptance(run, target, hidden, head, drafts, prompts, gens, ks=(1, 2, 4, 8)):
    """Mean tokens per step (accepted + 1) of each drafter, simulated exactly along the target's greedy outputs."""
    seqs, plens, truncated = [], [], 0
    rows = teacher_forced(run, target, hidden, head, drafts, [p + g for p, g in zip(prompts, gens)])
    for p, g, row in zip(prompts, gens, rows):
        seq = p + g
        # Keep the greedy sequence only as far as teacher-forced argmax agrees (batched fp32 ties are rare).
        end = len(p)
        while end < len(seq) and row["target"][end - 1] == seq[end]:
            end += 1
        truncated += end < len(seq)
        seqs.append((seq[:end], row))
        plens.append(len(p))
    result = {"sequences": len(seqs), "truncated_at_tie": truncated,
              "generated_tokens": sum(len(s) - pl for (s, _), pl in zip(seqs, plens))}
    lookups = {id(row): S.Lookup(seq) for seq, row in seqs}
    for k in ks:
        totals = {}
        for (seq, row), pl in zip(seqs, plens):
            if len(seq) <= pl:
                continue
            proposers = {"mtp": S.mtp_proposer(seq, row["mtp"], k), "lookup": lookups[id(row)].proposer(k)}
            for name in drafts:
                proposers[f"draft-{name}"] = S.draft_model_proposer(seq, row[name], k)
                proposers[f"lookup+draft-{name}"] = S.combined_proposer(proposers["lookup"], proposers[f"draft-{name}"])
            proposers["lookup+mtp"] = S.combined_proposer(proposers["lookup"], proposers["mtp"])
            for name, propose in proposers.items():
                tokens, steps = S.simulate(pl, seq, k, propose)
                a, b = totals.get(name, (0, 0))
                totals[name] = (a + tokens, b + steps)
        result[f"k={k}"] = {name: round(a / b, 3) for name, (a, b) in totals.items()}
    return result


EVAL_LANGUAGES = ("python", "javascript", "go", "rust", "c")


@torch.no_grad()
def language_losses(run, model, held_docs, chars=1_500_000):
    """Held-out loss per language on plain text (no FIM), windows of the training length."""
    out = {}
    for lang in EVAL_LANGUAGES:
        docs = [d for d in held_docs if d["language"] == lang]
        text, budget = [], chars // (50 if run.smoke else 1)
        for d in sorted(docs, key=lambda d: corpus.stable_hash(d["path"])):
            text.append(d)
            budget -= len(d["text"])
            if budget <= 0:
                break
        if not text:
            continue
        stream = torch.from_numpy(data.build_stream(run.tok(), text, SEED + 9, repeat={}, fim_rate=0.0)
                                  .astype(np.int32)).to(run.device)
        if len(stream) > run.seq + 1:
            out[lang] = round(held_out_loss(run, model, stream, n=16), 4)
    return out


def completions_for(run, name, model, tok, tasks, order, repo_level, new=64):
    eos = tok.token_to_id("<|endoftext|>")
    stop = torch.arange(len(SPECIAL), device=run.device)
    prompts = [fim_prompt(tok, t, order, repo_level) for t in tasks]
    t0 = time.time()
    outs = greedy(model, prompts, 16 if run.smoke else new, stop, eos, run.device)
    log(f"eval: {name} {order} {len(tasks)} tasks in {time.time() - t0:.0f}s")
    return prompts, outs


def stage_eval(run):
    """Everything on the shipped bytes (the Q8_0 files, dequantised), and the previous shipped model on the same tasks."""
    _, held, plain = run.streams()
    _, held_docs = run.docs()
    target, hidden = load_target(run)
    head = M.load_mtp(os.path.join(run.model_dir, "mtp.safetensors"), target.config).to(run.device).eval()
    drafts = {name: M.load_qwen2(d).to(run.device).eval() for name, d in run.draft_dirs.items()}
    n_tasks, n_ltr = (6, 4) if run.smoke else (run.args.fim_tasks, 100)
    tasks = [t for i, lang in enumerate(EVAL_LANGUAGES)
             for t in data.fim_tasks([d for d in held_docs if d["language"] == lang], n_tasks, SEED + 4 + i)]
    report = {"held_out_loss": {"target": held_out_loss(run, target, held),
                                **{f"draft-{n}": held_out_loss(run, d, held) for n, d in drafts.items()}},
              "held_out_loss_plain_per_language": language_losses(run, target, held_docs),
              "tasks_per_language": {lang: sum(t["language"] == lang for t in tasks) for lang in EVAL_LANGUAGES}}
    fim, completions, prompts = {}, {}, {}
    for name, model in [("target", target)] + [(f"draft-{n}", d) for n, d in drafts.items()]:
        for order in (("psm", "spm") if name == "target" else (run.args.fim_order,)):
            prompts[(name, order)], completions[(name, order)] = completions_for(run, name, model, run.tok(), tasks,
                                                                                order, True)
            fim[f"{name} {order}"] = fim_scores(run.tok(), tasks, completions[(name, order)])
    if run.baseline and os.path.exists(os.path.join(run.baseline, "model.safetensors")):
        from tokenizer import load_tokenizer as load_tok
        old, old_tok = M.load_qwen2(run.baseline).to(run.device).eval(), load_tok(run.baseline)
        with open(os.path.join(run.baseline, "config.json")) as f:
            old_order = json.load(f).get("runahead", {}).get("fim_order", "psm")
        _, outs = completions_for(run, "previous model", old, old_tok, tasks, old_order, False)
        fim[f"previous model {old_order}"] = fim_scores(old_tok, tasks, outs)
        del old
    report["fim"] = fim
    order = run.args.fim_order
    report["fim_examples"] = [{"language": t["language"], "kind": t["kind"], "middle": t["middle"],
                               "target": run.tok().decode([i for i in c if i >= len(SPECIAL)])}
                              for t, c in list(zip(tasks, completions[("target", order)]))[::max(1, len(tasks) // 24)]]
    report[f"acceptance_fim_{order}"] = acceptance(run, target, hidden, head, drafts, prompts[("target", order)],
                                                   completions[("target", order)])
    gen = torch.Generator(device=run.device).manual_seed(SEED + 6)
    ltr_prompts = windows(plain, n_ltr, 255, gen).tolist()
    ltr = greedy(target, ltr_prompts, 16 if run.smoke else 128,
                 torch.tensor([], device=run.device, dtype=torch.long), run.eos(), run.device)
    report["acceptance_left_to_right"] = acceptance(run, target, hidden, head, drafts, ltr_prompts, ltr)
    # The draft that accepts more alone at k = 4 on completions ships in draft/.
    k4 = report[f"acceptance_fim_{order}"]["k=4"]
    ship = max(DRAFT_LOSSES, key=lambda n: k4[f"draft-{n}"])
    shutil.rmtree(os.path.join(run.model_dir, "draft"), ignore_errors=True)
    shutil.copytree(run.draft_dirs[ship], os.path.join(run.model_dir, "draft"))
    report["shipped_draft"] = ship
    sizes = {}
    for dirpath, _, files in os.walk(run.model_dir):
        for f in files:
            sizes[os.path.relpath(os.path.join(dirpath, f), run.model_dir)] = os.path.getsize(os.path.join(dirpath, f))
    report["bundle_bytes"] = sum(sizes.values())
    report["files"] = sizes
    with open(os.path.join(run.logs, "eval.json"), "w") as f:
        json.dump(report, f, indent=2)
    log("eval: " + json.dumps({k: v for k, v in report.items() if k not in ("fim_examples", "files")}, indent=1))
    if report["bundle_bytes"] > BUNDLE_LIMIT:
        raise SystemExit(f"bundle {report['bundle_bytes']} bytes, over {BUNDLE_LIMIT}")


def stage_ship(run):
    """Keeps the bf16 weights in the work folder and rewrites the model folder, its MTP head and both drafts in Q8_0."""
    shutil.rmtree(run.master, ignore_errors=True)
    shutil.copytree(run.model_dir, run.master, ignore=shutil.ignore_patterns("draft"))
    M.ship_q8_0(run.model_dir, os.path.join(run.model_dir, "mtp.safetensors"))
    for folder in run.draft_dirs.values():
        M.ship_q8_0(folder)
    for folder in [run.model_dir] + list(run.draft_dirs.values()):
        log(f"ship: {folder}/model.safetensors {os.path.getsize(os.path.join(folder, 'model.safetensors')) / 1e6:.2f} MB")


STAGES = {"corpus": stage_corpus, "tokenizer": stage_tokenizer, "target": stage_target, "mtp": stage_mtp,
          "draft": stage_draft, "ship": stage_ship, "eval": stage_eval}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stages", nargs="+", choices=list(STAGES) + ["all"])
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, a sliver of data, 3 steps a stage")
    ap.add_argument("--work", help="scratch folder (corpus cache, KL draft)")
    ap.add_argument("--model", help="model folder to write (default engine/models/runahead-coder)")
    ap.add_argument("--export", help="folder to tar outputs into after every stage")
    ap.add_argument("--steps-target", type=int, default=1500)
    ap.add_argument("--steps-mtp", type=int, default=400)
    ap.add_argument("--steps-draft", type=int, default=400, help="KL distillation steps")
    ap.add_argument("--steps-draft-tv", type=int, default=100, help="then TV + 0.1 KL fine-tune steps on a copy")
    ap.add_argument("--sample-batches", type=int, default=2)
    ap.add_argument("--fim-tasks", type=int, default=200, help="per language")
    ap.add_argument("--fim-order", choices=("psm", "spm"), default="spm", help="the order config.json asks the server for")
    ap.add_argument("--baseline", help="the previously shipped model folder, evaluated on the same tasks")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    run = Run(args)
    random.seed(SEED)
    stages = list(STAGES) if args.stages == ["all"] else args.stages
    for name in stages:
        t0 = time.time()
        log(f"== {name}")
        STAGES[name](run)
        log(f"== {name} done in {time.time() - t0:.0f}s")
        run.export()


if __name__ == "__main__":
    main()
