// The training corpus manifest (engine/train/corpus/manifest.tsv, written by
// fetch_corpus.py): every line well-formed, no package of ../shared/RESERVED.md
// in any of its names (Debian's python3-x, golang-github-owner-x-dev,
// librust-x-dev, node-x, npm's @scope/x), and held-out packages for each main
// language so the evaluation has real code to run on.
import { strict as assert } from 'node:assert';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from './helpers';

const manifestPath = join(repoRoot, 'engine', 'train', 'corpus', 'manifest.tsv');
const reservedPath = join(repoRoot, '..', 'shared', 'RESERVED.md');
const LANGUAGES = new Set(['python', 'javascript', 'go', 'rust', 'c', 'java', 'json', 'yaml', 'markdown', 'shell', 'toml']);
const CODE = ['python', 'javascript', 'go', 'rust', 'c', 'java'];
const tokens = (name: string) => name.toLowerCase().split(/[/\\._@+~:\-\s]+/).filter(Boolean);

/** Each reserved name as a run of tokens: a Go module by owner and name, anything else whole. */
function reservedRuns(markdown: string): string[][] {
  const runs: string[][] = [];
  for (const line of markdown.split('\n')) {
    const cells = line.trim().replace(/^\||\|$/g, '').split('|').map((c) => c.trim());
    if (!line.startsWith('|') || cells.length !== 2 || cells[0] === 'language' || /^[-: ]+$/.test(cells[1])) continue;
    for (const raw of cells[1].split(',').map((n) => n.trim().toLowerCase()).filter(Boolean)) {
      const name = /^(github\.com|golang\.org|gopkg\.in)\//.test(raw) ? raw.split('/').slice(1).join('/') : raw;
      runs.push(tokens(name));
    }
  }
  return runs;
}

function reservedIn(name: string, runs: string[][]): string[] | undefined {
  const t = tokens(name);
  return runs.find((run) => t.some((_, i) => run.every((r, j) => t[i + j] === r)));
}

interface Row { source: string; pkg: string; version: string; languages: string[]; files: number; bytes: number; split: string }

function readManifest(): Row[] {
  const rows: Row[] = [];
  readFileSync(manifestPath, 'utf8').split('\n').forEach((line, i) => {
    if (!line || line.startsWith('#')) return;
    const where = `manifest.tsv:${i + 1}`;
    const f = line.split('\t');
    assert.equal(f.length, 7, `${where}: ${f.length} fields; expected source, package, version, languages, files, bytes, split`);
    const [source, pkg, version, languages, files, bytes, split] = f;
    assert.ok(source === 'debian' || source === 'npm', `${where}: source ${source}; expected debian or npm`);
    assert.match(pkg, /^[@a-z0-9][\w.+@/-]*$/i, `${where}: package ${pkg}`);
    assert.match(version, /^\S+$/, `${where}: version ${version}`);
    for (const l of languages.split(',')) assert.ok(LANGUAGES.has(l), `${where}: language ${l}; expected one of ${[...LANGUAGES]}`);
    assert.match(files, /^[1-9]\d*$/, `${where}: files ${files}; expected a positive count`);
    assert.match(bytes, /^[1-9]\d*$/, `${where}: bytes ${bytes}; expected a positive count`);
    assert.ok(split === 'train' || split === 'held_out', `${where}: split ${split}; expected train or held_out`);
    rows.push({ source, pkg, version, languages: languages.split(','), files: +files, bytes: +bytes, split });
  });
  return rows;
}

describe('corpus manifest', () => {
  const runs = reservedRuns(readFileSync(reservedPath, 'utf8'));

  it('reads the reserved packages of RESERVED.md and finds them in every naming scheme', () => {
    assert.ok(existsSync(reservedPath), `${reservedPath} is missing`);
    assert.ok(runs.length >= 16, `RESERVED.md: ${runs.length} reserved packages read; expected the whole table`);
    for (const name of ['python3-sqlalchemy', 'python3-flask-sqlalchemy', 'golang-github-spf13-cobra-dev',
      'golang-github-gorilla-mux-dev', 'librust-serde-json-dev', 'librust-clap-4-dev', 'node-express', 'rxjs',
      '@types/express', 'date-fns', 'mercurial', 'python3-docutils']) {
      assert.ok(reservedIn(name, runs), `${name} should count as reserved`);
    }
    for (const name of ['python3-requests', 'expression-eval', 'golang-github-gorilla-websocket-dev', 'librust-serde-dev']) {
      assert.equal(reservedIn(name, runs), undefined, `${name} is not reserved`);
    }
  });

  it('has well-formed lines, each package once, none of them reserved', () => {
    const rows = readManifest();
    assert.ok(rows.length >= 100, `${rows.length} packages; expected hundreds`);
    const seen = new Set<string>();
    for (const r of rows) {
      const key = `${r.source} ${r.pkg}`;
      assert.ok(!seen.has(key), `${key} is listed twice`);
      seen.add(key);
      const hit = reservedIn(r.pkg, runs);
      assert.equal(hit, undefined, `${key} is reserved (${hit?.join('-')}, ../shared/RESERVED.md)`);
    }
  });

  it('holds out whole packages of python, javascript, go and rust', () => {
    const held = new Map<string, number>();
    for (const r of readManifest().filter((row) => row.split === 'held_out')) {
      const main = r.languages.find((l) => CODE.includes(l)) ?? r.languages[0];
      held.set(main, (held.get(main) ?? 0) + r.bytes);
    }
    for (const language of ['python', 'javascript', 'go', 'rust']) {
      assert.ok((held.get(language) ?? 0) >= 100_000, `${language}: ${held.get(language) ?? 0} held-out bytes; expected at least 100,000`);
    }
  });

  // What the shipped model was really trained and evaluated on: the archive's packages plus the GPU machine's
  // own site-packages, as the training run wrote them (engine/train/splits/*.txt: language, package, files, bytes).
  for (const split of ['train', 'held_out']) {
    it(`the shipped model's ${split} split (engine/train/splits/${split}.txt) has no reserved package, and none in both splits`, () => {
      const path = join(repoRoot, 'engine', 'train', 'splits', `${split}.txt`);
      const other = join(repoRoot, 'engine', 'train', 'splits', `${split === 'train' ? 'held_out' : 'train'}.txt`);
      const names = (file: string) => readFileSync(file, 'utf8').split('\n').filter((l) => l && !l.startsWith('#')).map((l) => l.split('\t')[1]);
      const mine = names(path);
      assert.ok(mine.length >= 50, `${path}: ${mine.length} packages`);
      for (const pkg of mine) {
        const hit = reservedIn(pkg, runs);
        assert.equal(hit, undefined, `${split}.txt: ${pkg} is reserved (${hit?.join('-')}, ../shared/RESERVED.md)`);
      }
      const theirs = new Set(names(other));
      const both = mine.filter((p) => theirs.has(p));
      assert.deepEqual(both, [], `packages in both splits: ${both.join(', ')}`);
    });
  }
});
