"""Build the training corpus archive from the pinned packages of corpus/sources.txt.

    python3 engine/train/fetch_corpus.py        # downloads into .corpus/cache, writes .corpus/corpus.jsonl.xz

Each line of sources.txt is `debian <package> <version>` (apt-get download) or
`npm <name> <version>` (npm pack). Every package is read straight from its
.deb (dpkg-deb --fsys-tarfile) or .tgz; its source files are taken by extension,
filtered (corpus.keep_source, corpus.is_reserved_path, vendored folders), capped,
deduplicated exactly and near-exactly across packages, and the package goes
whole into one split. Writes the archive and corpus/manifest.tsv + corpus/README.md.
"""
import hashlib
import io
import json
import lzma
import multiprocessing
import os
import re
import subprocess
import sys
import tarfile
import time
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = os.path.join(HERE, "corpus", "sources.txt")
MANIFEST = os.path.join(HERE, "corpus", "manifest.tsv")
SUMMARY = os.path.join(HERE, "corpus", "README.md")
WORK = os.path.join(corpus.ROOT, ".corpus")
CACHE = os.path.join(WORK, "cache")
ARCHIVE = os.path.join(WORK, "corpus.jsonl.xz")
MAX_ARCHIVE_BYTES = 28_000_000  # travels to the GPU machine beside the working tree, within 64 MiB
PACKAGE_CAP = 1_200_000  # text bytes taken from one package, code and the rest together
OTHER_CAP = 200_000  # per package and per non-code language (markdown, json, yaml, shell, toml)
# Text bytes per package's main language; sources.txt lists a little more than fits, so the list's order decides.
BUDGET = {"python": 46_000_000, "javascript": 46_000_000, "go": 27_000_000, "rust": 27_000_000, "c": 22_000_000,
          "java": 1_200_000}
HELD_OUT_PERCENT = 8
HELD_OUT_MIN = 400_000  # bytes of held-out text each main language must have at least
MAIN_LANGUAGES = ("python", "javascript", "go", "rust")
CODE = ("python", "javascript", "go", "rust", "c", "java")
NEAR_JACCARD = 0.8  # line-set Jaccard at or above which a file is a near-duplicate of one kept earlier
BINS, BAND = 32, 4  # one-permutation MinHash: 32 bins, LSH bands of 4 bins

EXTENSIONS = {
    ".py": "python", ".pyi": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "javascript", ".tsx": "javascript", ".mts": "javascript", ".cts": "javascript",
    ".go": "go", ".rs": "rust", ".java": "java",
    ".c": "c", ".h": "c", ".cc": "c", ".cpp": "c", ".cxx": "c", ".hpp": "c", ".hh": "c", ".hxx": "c",
    ".ipp": "c", ".inl": "c", ".tcc": "c",
    ".md": "markdown", ".yml": "yaml", ".yaml": "yaml", ".sh": "shell", ".bash": "shell", ".toml": "toml",
}
JSON_NAMES = ("package.json", "tsconfig.json", "jsconfig.json", "deno.json", "composer.json")
# Folders that hold someone else's copy, build output or data, not the package's own source.
VENDORED = {"vendor", "vendored", "_vendor", "node_modules", "third_party", "third-party", "thirdparty", "dist",
            "umd", "bundles", "bower_components", "testdata", "test-data", "__snapshots__", "benchmarks-data"}
DEBIAN_SKIP = ("usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/lintian/",
               "usr/share/help/", "usr/share/icons/")
LOW_VALUE = re.compile(r"(^|/)(changelog|changes|history|news|authors|contributors|code_of_conduct)[^/]*$", re.I)


def read_sources(path=SOURCES):
    """[(source, package, version)] of sources.txt; errors name the line and what was expected."""
    out = []
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) != 3 or fields[0] not in ("debian", "npm"):
            raise SystemExit(f"{path}:{number}: expected 'debian|npm <package> <version>', got {line!r}")
        if corpus.is_reserved_path(fields[1]):
            raise SystemExit(f"{path}:{number}: {fields[1]} is reserved (../shared/RESERVED.md)")
        out.append(tuple(fields))
    return out


def cache_file(source, package, version):
    if source == "debian":
        return os.path.join(CACHE, "debian", f"{package}_{version.replace(':', '%3a')}.deb")
    return os.path.join(CACHE, "npm", f"{package.replace('/', '__')}-{version}.tgz")


def fetched_name(source, package, version, names):
    """The file apt-get download (pkg_version_arch.deb, epoch as %3a) or npm pack (scope-name-version.tgz) made."""
    if source == "debian":
        prefixes = (f"{package}_{version.replace(':', '%3a')}_",)
    else:
        prefixes = (f"{package.lstrip('@').replace('/', '-')}-{version}.tgz",)
    return next((n for n in sorted(names) if n.startswith(prefixes)), None)


def download(sources):
    """Fetch what the cache lacks with apt-get download or npm pack, then rename each file to cache_file()."""
    for source in ("debian", "npm"):
        folder = os.path.join(CACHE, source)
        os.makedirs(folder, exist_ok=True)
        os.chmod(folder, 0o777)  # apt's _apt user writes there
        missing = [(p, v) for s, p, v in sources if s == source and not os.path.exists(cache_file(s, p, v))]
        for i in range(0, len(missing), 40):
            batch = missing[i:i + 40]
            names = os.listdir(folder)
            get = [(p, v) for p, v in batch if fetched_name(source, p, v, names) is None]
            if get and source == "debian":
                subprocess.run(["apt-get", "download", "-q"] + [f"{p}={v}" for p, v in get], cwd=folder, check=True)
            elif get:
                subprocess.run(["npm", "pack", "--silent"] + [f"{p}@{v}" for p, v in get], cwd=folder, check=True,
                               stdout=subprocess.DEVNULL)
            names = os.listdir(folder)
            for p, v in batch:
                name = fetched_name(source, p, v, names)
                if name is None:
                    raise SystemExit(f"{source} {p} {v}: downloaded, but its file did not appear in {folder}")
                os.rename(os.path.join(folder, name), cache_file(source, p, v))


def members(path):
    """(path, bytes) of the regular files of a .deb or .tgz; a zip inside (openjdk's src.zip) is opened too."""
    if path.endswith(".deb"):
        data = subprocess.run(["dpkg-deb", "--fsys-tarfile", path], check=True, capture_output=True).stdout
        tar = tarfile.open(fileobj=io.BytesIO(data))
    else:
        tar = tarfile.open(path)
    for m in tar:
        name = m.name.lstrip("./")
        if not m.isfile():
            continue
        if name.endswith("src.zip"):
            with zipfile.ZipFile(io.BytesIO(tar.extractfile(m).read())) as z:
                for info in z.infolist():
                    if not info.is_dir() and info.file_size <= corpus.MAX_BYTES:
                        yield f"{name}/{info.filename}", z.read(info)
        elif m.size <= corpus.MAX_BYTES:
            yield name, tar.extractfile(m).read()


def language_of(path):
    name = os.path.basename(path)
    if name in JSON_NAMES or name.startswith("tsconfig.") and name.endswith(".json"):
        return "json"
    if "/include/c++/" in path and "." not in name:
        return "c"  # libstdc++'s headers have no extension
    return EXTENSIONS.get(os.path.splitext(name)[1].lower())


def wanted(source, path):
    """The language of a file worth reading, or None: vendored, reserved, docs and low-value files are not."""
    if source == "debian" and path.startswith(DEBIAN_SKIP):
        return None
    if source == "npm" and path.startswith("package/"):
        path = path[len("package/"):]
    parts = path.lower().split("/")
    # A dist folder's .d.ts is the package's typed API: kept; its .js is build output.
    folders = [p for p in parts[:-1] if p != "dist" or not path.endswith(".d.ts")]
    if any(p in VENDORED or p in corpus.SKIP_DIRS for p in folders):
        return None
    if LOW_VALUE.search(path) or corpus.is_reserved_path(path):
        return None
    return language_of(path)


def normalized(text):
    return "\n".join(line.rstrip() for line in text.split("\n") if line.strip())


def line_hashes(text):
    """64-bit hashes of the distinct meaningful lines (whitespace stripped, short ones like '}' skipped)."""
    lines = {line.strip() for line in text.split("\n")}
    return {int.from_bytes(hashlib.blake2b(line.encode(), digest_size=8).digest(), "little")
            for line in lines if len(line) >= 8}


def signature(hashes):
    """One-permutation MinHash: the smallest hash in each of BINS bins (None where a bin is empty)."""
    sig = [None] * BINS
    for h in hashes:
        b = h % BINS
        if sig[b] is None or h < sig[b]:
            sig[b] = h
    return sig


def read_package(entry):
    """The kept files of one package, each with the hashes that deduplication needs; capped, in hash order."""
    source, package, version = entry
    files = []
    for path, data in members(cache_file(source, package, version)):
        language = wanted(source, path)
        if language is None:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if source == "npm" and path.startswith("package/"):
            path = path[len("package/"):]
        if corpus.keep_source(path, text):
            files.append((path, language, text))
    docs, taken, other = [], 0, {}
    for path, language, text in sorted(files, key=lambda f: corpus.stable_hash(f[0])):
        if taken + len(text) > PACKAGE_CAP:
            continue
        if language not in CODE:
            if other.get(language, 0) + len(text) > OTHER_CAP:
                continue
            other[language] = other.get(language, 0) + len(text)
        taken += len(text)
        hashes = line_hashes(text)
        docs.append({"package": package, "version": version, "source": source, "language": language,
                     "path": path, "text": text,
                     "_exact": hashlib.sha1(normalized(text).encode()).digest(), "_lines": hashes,
                     "_sig": signature(hashes) if len(hashes) >= 8 else None})
    return entry, docs, reserved_dependency(source, files)


def reserved_dependency(source, files):
    """The reserved package an npm package depends on (a wrapper of it is not taken), or None."""
    for path, language, text in files:
        if source == "npm" and path == "package.json":
            meta = json.loads(text)
            for key in ("dependencies", "peerDependencies", "optionalDependencies"):
                for name in meta.get(key) or {}:
                    if corpus.is_reserved_path(name):
                        return name
    return None


class Dedup:
    """Exact (normalized text) and near-duplicate (line-set Jaccard, found by LSH over MinHash bands) filter;
    the first file seen is kept."""

    def __init__(self):
        self.exact, self.bands, self.lines = set(), {}, []
        self.exact_dropped = self.near_dropped = 0

    def keep(self, doc):
        if doc["_exact"] in self.exact:
            self.exact_dropped += 1
            return False
        self.exact.add(doc["_exact"])
        sig = doc["_sig"]
        if sig is None:
            return True
        keys = [(i, tuple(sig[i:i + BAND])) for i in range(0, BINS, BAND)]
        keys = [k for k in keys if any(v is not None for v in k[1])]
        mine = doc["_lines"]
        candidates = {c for k in keys for c in self.bands.get(k, ())}
        for c in candidates:
            other = self.lines[c]
            if len(mine & other) >= NEAR_JACCARD * len(mine | other):
                self.near_dropped += 1
                return False
        self.lines.append(mine)
        for k in keys:
            self.bands.setdefault(k, []).append(len(self.lines) - 1)
        return True


def main_language(docs):
    sizes = {}
    for d in docs:
        if d["language"] in CODE:
            sizes[d["language"]] = sizes.get(d["language"], 0) + len(d["text"])
    return max(sizes, key=sizes.get) if sizes else docs[0]["language"]


def choose_held_out(packages):
    """Packages held out: HELD_OUT_PERCENT by a stable hash of the name (among languages of 10 packages or
    more: the only Java package must train), then, in the same hash order, more until each main language
    has HELD_OUT_MIN bytes held out."""
    count = {}
    for info in packages.values():
        count[info["language"]] = count.get(info["language"], 0) + 1
    held = {key for key, info in packages.items()
            if count[info["language"]] >= 10 and corpus.stable_hash(key[1]) % 100 < HELD_OUT_PERCENT}
    for language in MAIN_LANGUAGES:
        mine = sorted((k for k in packages if packages[k]["language"] == language),
                      key=lambda k: corpus.stable_hash(k[1]))
        for key in mine:
            if sum(packages[k]["bytes"] for k in held if k in mine) >= HELD_OUT_MIN:
                break
            held.add(key)
    return held


def write_outputs(kept, held, stats):
    by_package = {}
    for d in kept:
        by_package.setdefault((d["source"], d["package"]), []).append(d)
    total = {}
    with lzma.open(ARCHIVE + ".tmp", "wt", encoding="utf-8", preset=9) as f:
        for key, docs in by_package.items():
            split = "held_out" if key in held else "train"
            for d in docs:
                d["split"] = split
                f.write(json.dumps({k: d[k] for k in ("package", "version", "source", "language", "path", "split",
                                                      "text")}, ensure_ascii=False) + "\n")
                total[(d["language"], split)] = total.get((d["language"], split), 0) + len(d["text"].encode())
    os.replace(ARCHIVE + ".tmp", ARCHIVE)
    size = os.path.getsize(ARCHIVE)
    with open(MANIFEST, "w") as f:
        f.write("# source\tpackage\tversion\tlanguages\tfiles\tbytes\tsplit\n")
        for key, docs in sorted(by_package.items()):
            langs = {}
            for d in docs:
                langs[d["language"]] = langs.get(d["language"], 0) + len(d["text"].encode())
            order = ",".join(sorted(langs, key=lambda l: -langs[l]))
            split = "held_out" if key in held else "train"
            f.write(f"{key[0]}\t{key[1]}\t{docs[0]['version']}\t{order}\t{len(docs)}\t{sum(langs.values())}\t{split}\n")
    languages = sorted({l for l, _ in total}, key=lambda l: -sum(total.get((l, s), 0) for s in ("train", "held_out")))
    all_bytes = sum(total.values())
    lines = ["# The corpus (written by fetch_corpus.py)", "",
             "`python3 engine/train/fetch_corpus.py` downloads the packages pinned in `sources.txt` and writes",
             "`.corpus/corpus.jsonl.xz` (one JSON a line: package, version, source, language, path, split, text)",
             "and `manifest.tsv` (a line per package: source, package, version, languages by bytes, files,",
             "bytes, split). The packages of `../shared/RESERVED.md` are never taken, in any form",
             "(`corpus.is_reserved_path`; `test/unit/corpusManifest.test.ts` checks this manifest).", "",
             f"{len(by_package)} packages, {len(kept)} files, {all_bytes / 1e6:.1f} MB of text, archive "
             f"{size:,} bytes (xz -9). Dropped: {stats['exact']} exact duplicates, {stats['near']} near-duplicates "
             f"(line-set Jaccard >= {NEAR_JACCARD}); {stats['reserved_dep']} npm packages that depend on a reserved one.",
             "", "| language | train bytes | held-out bytes | share |", "|---|---:|---:|---:|"]
    for l in languages:
        t, h = total.get((l, "train"), 0), total.get((l, "held_out"), 0)
        lines.append(f"| {l} | {t:,} | {h:,} | {100 * (t + h) / all_bytes:.1f}% |")
    counts = {}
    for key, docs in by_package.items():
        lang = main_language(docs)
        counts.setdefault(lang, [0, 0])[key in held] += 1
    lines += ["", "| main language | train packages | held-out packages |", "|---|---:|---:|"]
    lines += [f"| {l} | {c[0]} | {c[1]} |" for l, c in sorted(counts.items())]
    with open(SUMMARY, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[8:]))
    if size > MAX_ARCHIVE_BYTES:
        raise SystemExit(f"{ARCHIVE}: {size:,} bytes, over the {MAX_ARCHIVE_BYTES:,} allowed to travel; "
                         "take packages out of sources.txt")


def main():
    start = time.time()
    sources = read_sources()
    download(sources)
    print(f"{len(sources)} packages in the cache ({time.time() - start:.0f} s)", flush=True)
    dedup, kept, packages, stats = Dedup(), [], {}, {"reserved_dep": 0}
    used = dict.fromkeys(BUDGET, 0)
    with multiprocessing.Pool(os.cpu_count()) as pool:
        for (source, package, version), docs, dependency in pool.imap(read_package, sources, chunksize=2):
            if dependency:
                print(f"skipped {source} {package}: depends on reserved {dependency}")
                stats["reserved_dep"] += 1
                continue
            if not docs:
                print(f"no files kept from {source} {package} {version}")
                continue
            language = main_language(docs)
            if used.get(language, 0) >= BUDGET.get(language, 0):
                print(f"over the {language} budget: {source} {package} {version}")
                continue
            mine = [d for d in docs if dedup.keep(d)]
            if not mine:
                print(f"no files kept from {source} {package} {version} (all duplicates)")
                continue
            for d in mine:
                del d["_exact"], d["_lines"], d["_sig"]
            kept += mine
            packages[(source, package)] = {"language": main_language(mine), "bytes": sum(len(d["text"]) for d in mine)}
            used[language] += packages[(source, package)]["bytes"]
    stats["exact"], stats["near"] = dedup.exact_dropped, dedup.near_dropped
    print("text by main language: " + ", ".join(f"{l} {b / 1e6:.1f} MB" for l, b in used.items()), flush=True)
    print(f"read and deduplicated ({time.time() - start:.0f} s)", flush=True)
    write_outputs(kept, choose_held_out(packages), stats)
    print(f"{ARCHIVE} written ({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
