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
SEGMENT_CHARS = 5000


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


# Empty middles stay rare: under greedy decoding a model that gives "nothing" even a modest share answers nothing
# whenever it is unsure (a run with 6% empty kinds plus blank-line cursors answered nothing to 32-92% of tasks).
SPAN_KINDS = (("rest_of_line", 32), ("mid_line", 12), ("lines", 25), ("block", 18), ("random", 12), ("empty", 1))


def indent_of(line):
    return len(line) - len(line.lstrip(" \t"))


def cursor_span(text, rng):
    """(start, end) of a middle as completion sees it, in SPAN_KINDS' shares: the rest of a line from a cursor
    inside it; a piece inside one line (an argument, an expression); 1-3 whole lines from their indent; a block
    (a line and the deeper-indented lines under it); a random character span; or nothing (the code is complete)."""
    starts = line_starts(text)
    kind = rng.choices([k for k, _ in SPAN_KINDS], [w for _, w in SPAN_KINDS])[0]
    for _ in range(8):  # a cursor on a line with code (a blank line's "rest" is empty)
        i = rng.randrange(len(starts))
        line_end = text.find("\n", starts[i])
        line_end = len(text) if line_end < 0 else line_end
        line = text[starts[i]:line_end]
        if line.strip():
            break
    body = starts[i] + indent_of(line)
    if kind == "rest_of_line":
        return rng.randint(body, max(body, line_end - 1)), line_end
    if kind == "mid_line":
        a, b = sorted(rng.randint(body, line_end) for _ in range(2))
        return a, max(b, min(line_end, a + 1))
    if kind == "empty":
        pos = rng.choice((rng.randint(body, line_end), line_end, body))
        return pos, pos
    if kind == "random":
        start = rng.randrange(len(text) + 1)
        return start, min(len(text), start + rng.randint(1, 256))
    j = min(len(starts), i + rng.randint(1, 3))
    if kind == "block":
        j = i + 1
        while j < len(starts) and j - i < 16:
            nxt_end = text.find("\n", starts[j])
            nxt = text[starts[j]:len(text) if nxt_end < 0 else nxt_end]
            if nxt.strip() and indent_of(nxt) <= indent_of(line):
                break
            j += 1
    end = starts[j] - 1 if j < len(starts) else len(text)
    return body, max(body, end)


def display_path(doc):
    """The file's path as the server sends it (relative to the workspace folder): install prefixes removed."""
    path = doc["path"]
    for marker in ("dist-packages/", "site-packages/", "gocode/src/", "cargo/registry/", "node_modules/", "package/",
                   "usr/include/", "usr/share/"):
        cut = path.rfind(marker)
        if cut >= 0:
            return path[cut + len(marker):]
    return path


class StreamBuilder:
    """Collects documents as plans of special ids and text pieces, then encodes them all at once."""

    def __init__(self, tok):
        self.tok = tok
        self.ids = {name: tok.token_to_id(name) for name in
                    ("<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|repo_name|>",
                     "<|file_sep|>")}
        self.texts, self.plan, self.chunk_plan = [], [], []

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

    def add_repo(self, name):
        self._special("<|repo_name|>")
        self._text(name + "\n")

    def add_document(self, text, rng, fim_rate=FIM_RATE, path=None):
        """The document in chunks of whole lines, each headed by `<|file_sep|>path` as the server's repo-level prompt
        is (when path is given), each either plain text or one FIM example."""
        for seg in segments(text):
            self.chunk_plan.append(len(self.plan))
            if path is not None:
                self._special("<|file_sep|>")
                self._text(path + "\n")
            if rng.random() < fim_rate:
                start, end = cursor_span(seg, rng)
                self.add_fim(seg[:start], seg[start:end], seg[end:], rng.choice(("psm", "spm")))
            else:
                self._text(seg)

    def end(self):
        self._special("<|endoftext|>")

    def build(self, chunk=20000):
        """The whole stream as one uint16 array, and the offsets where chunks (a file header, a FIM example) begin."""
        encode = getattr(self.tok, "encode_batch_fast", self.tok.encode_batch)
        encoded = []
        for i in range(0, len(self.texts), chunk):
            encoded += [np.asarray(e.ids, dtype=np.uint16) for e in encode(self.texts[i:i + chunk], add_special_tokens=False)]
        parts = [np.asarray([-1 - p], dtype=np.uint16) if p < 0 else encoded[p] for p in self.plan]
        if not parts:
            return np.zeros(0, dtype=np.uint16), np.zeros(0, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum([len(x) for x in parts])])
        return np.concatenate(parts), offsets[np.asarray(self.chunk_plan, dtype=np.int64)]


REPEAT = {"javascript": 2, "go": 2, "rust": 2}


def build_stream(tok, docs, seed, repeat=None, fim_rate=FIM_RATE, repo_level=True, with_starts=False):
    """Token stream of the documents grouped by package in a seeded order (the repo-level layout: the package's
    name, then its files, each `<|file_sep|>path`), smaller languages repeated (REPEAT). with_starts: also the
    offsets where chunks begin (training windows aligned there see whole FIM examples, as a prompt is)."""
    repeat = REPEAT if repeat is None else repeat
    rng = random.Random(seed)
    packages = {}
    for d in docs:
        packages.setdefault((d["language"], d["package"]), []).append(d)
    items = [(key, r) for key in sorted(packages) for r in range(repeat.get(key[0], 1))]
    rng.shuffle(items)
    builder = StreamBuilder(tok)
    for (language, package), r in items:
        files = sorted(packages[(language, package)], key=lambda d: stable_hash(d["path"]) + r)
        prng = random.Random(stable_hash(package) + 7919 * r + seed)
        # Packages in runs of a few files, as a workspace's open files are; single files without a repo name too.
        for start in range(0, len(files), 4):
            if repo_level and prng.random() < 0.7:
                builder.add_repo(package.split("/")[-1])
            for doc in files[start:start + 4]:
                path = display_path(doc) if repo_level and prng.random() < 0.9 else None
                builder.add_document(doc["text"], random.Random(stable_hash(doc["path"]) + 7919 * r + seed), fim_rate, path)
            builder.end()
    stream, starts = builder.build()
    return (stream, starts) if with_starts else stream


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


def fim_tasks(docs, n, seed, max_prefix=3000, max_suffix=1000):
    """n realistic completion tasks from held-out files: a cursor at a line start (the middle is the
    rest of that line, or a block of 1-3 lines) or inside a line (the rest of the line); prefix and
    suffix are whole lines around them.
    Returns dicts {prefix, middle, suffix, kind, path, package, language}."""
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
                      "suffix": whole_lines_after(text, end, max_suffix), "kind": kind, "path": display_path(doc),
                      "package": doc["package"].split("/")[-1], "language": doc["language"]})
    return tasks
