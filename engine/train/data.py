"""From documents to token streams: left-to-right text and fill-in-the-middle in
both orders, and the held-out FIM tasks of the evaluation.

A document is cut into segments of whole lines; each segment is either plain
text or, with probability FIM_RATE, one FIM example whose middle is a realistic
cursor span. Pure Python apart from the tokenizer passed in.
"""
import random

import numpy as np

from corpus import stable_hash

FIM_RATE = 0.5
SEGMENT_CHARS = 1500


def segments(text, max_chars=SEGMENT_CHARS):
    """Consecutive pieces of whole lines, each at most max_chars (a longer line stays whole)."""
    out, cur, size = [], [], 0
    for line in text.splitlines(keepends=True):
        if cur and size + len(line) > max_chars:
            out.append("".join(cur))
            cur, size = [], 0
        cur.append(line)
        size += len(line)
    if cur:
        out.append("".join(cur))
    return out


def line_starts(text):
    starts, i = [0], text.find("\n")
    while 0 <= i < len(text) - 1:
        starts.append(i + 1)
        i = text.find("\n", i + 1)
    return starts


def cursor_span(text, rng):
    """(start, end) of a middle as completion sees it: whole lines, the rest of a line from a
    cursor inside it (maybe a few more lines), or a random character span."""
    starts = line_starts(text)
    kind = rng.randrange(3)
    if kind == 0:
        i = rng.randrange(len(starts))
        j = min(len(starts), i + rng.randint(1, 5))
        return starts[i], starts[j] if j < len(starts) else len(text)
    if kind == 1:
        i = rng.randrange(len(starts))
        line_end = text.find("\n", starts[i])
        line_end = len(text) if line_end < 0 else line_end
        start = rng.randint(starts[i], line_end)
        j = i + 1 + rng.randint(0, 3) if rng.random() < 0.3 else i + 1
        end = line_end if j == i + 1 else (starts[j] - 1 if j < len(starts) else len(text))
        return start, max(start, end)
    start = rng.randrange(len(text) + 1)
    return start, min(len(text), start + rng.randint(0, 256))


class StreamBuilder:
    """Collects documents as plans of special ids and text pieces, then encodes them all at once."""

    def __init__(self, tok):
        self.tok = tok
        self.ids = {name: tok.token_to_id(name) for name in
                    ("<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>")}
        self.texts, self.plan = [], []

    def _text(self, s):
        self.texts.append(s)
        self.plan.append(len(self.texts) - 1)

    def _special(self, name):
        self.plan.append(-1 - self.ids[name])

    def add_fim(self, prefix, middle, suffix, order):
        first, second = (("<|fim_prefix|>", prefix), ("<|fim_suffix|>", suffix))[:: 1 if order == "psm" else -1]
        for name, text in (first, second):
            self._special(name)
            self._text(text)
        self._special("<|fim_middle|>")
        self._text(middle)
        self._special("<|endoftext|>")

    def add_document(self, text, rng, fim_rate=FIM_RATE):
        ended = False
        for seg in segments(text):
            if rng.random() < fim_rate:
                start, end = cursor_span(seg, rng)
                self.add_fim(seg[:start], seg[start:end], seg[end:], rng.choice(("psm", "spm")))
                ended = True
            else:
                self._text(seg)
                ended = False
        if not ended:
            self._special("<|endoftext|>")

    def build(self, chunk=20000):
        """The whole stream as one uint16 array."""
        encode = getattr(self.tok, "encode_batch_fast", self.tok.encode_batch)
        encoded = []
        for i in range(0, len(self.texts), chunk):
            encoded += [np.asarray(e.ids, dtype=np.uint16) for e in encode(self.texts[i:i + chunk], add_special_tokens=False)]
        parts = [np.asarray([-1 - p], dtype=np.uint16) if p < 0 else encoded[p] for p in self.plan]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint16)


def build_stream(tok, docs, seed, repeat_js=2, fim_rate=FIM_RATE):
    """Token stream of the documents in a seeded order; JS/TS repeated since it is the smaller language."""
    rng = random.Random(seed)
    items = [(d, r) for d in docs for r in range(repeat_js if d["language"] == "javascript" else 1)]
    rng.shuffle(items)
    builder = StreamBuilder(tok)
    for doc, r in items:
        builder.add_document(doc["text"], random.Random(stable_hash(doc["path"]) + 7919 * r + seed), fim_rate)
    return builder.build()


def whole_lines_before(text, pos, max_chars):
    """text[:pos] cut to at most max_chars, starting at a line start (as the server's prefix window does)."""
    start = max(0, pos - max_chars)
    if start > 0:
        start = text.find("\n", start - 1) + 1 or pos
    return text[min(start, pos):pos]


def whole_lines_after(text, pos, max_chars):
    """text[pos:] cut to at most max_chars, ending after a newline (as the server's suffix window does)."""
    if pos + max_chars >= len(text):
        return text[pos:]
    cut = text.rfind("\n", pos, pos + max_chars)
    return text[pos:cut + 1] if cut >= 0 else ""


def fim_tasks(docs, n, seed, max_prefix=1200, max_suffix=400):
    """n realistic completion tasks from held-out files: a cursor at a line start (the middle is the
    rest of that line, or a block of 1-3 lines) or inside a line (the rest of the line); prefix and
    suffix are whole lines around them.
    Returns dicts {prefix, middle, suffix, kind, path}."""
    rng = random.Random(seed)
    pool = sorted((d for d in docs if len(d["text"]) > 400), key=lambda d: stable_hash(d["path"]))
    tasks = []
    while len(tasks) < n and pool:
        doc = pool[rng.randrange(len(pool))]
        text = doc["text"]
        lines = text.splitlines(keepends=True)
        i = rng.randrange(len(lines))
        if len(lines[i].strip()) < 4 or len(lines[i]) > 120:
            continue
        start = sum(len(line) for line in lines[:i])
        indent = len(lines[i]) - len(lines[i].lstrip())
        kind = rng.choice(("line", "block", "mid-line"))
        if kind == "mid-line":
            body = lines[i].rstrip("\n")
            cut = rng.randint(indent + 1, max(indent + 1, len(body) - 2))
            begin, end = start + cut, start + len(body)
        else:
            count = 1 if kind == "line" else rng.randint(2, 3)
            block = "".join(lines[i:i + count]).rstrip("\n")
            begin, end = start + indent, start + len(block)
        middle = text[begin:end]
        if not middle.strip() or len(middle) > 240:
            continue
        tasks.append({"prefix": whole_lines_before(text, begin, max_prefix), "middle": middle,
                      "suffix": whole_lines_after(text, end, max_suffix), "kind": kind, "path": doc["path"]})
    return tasks
