// Fill-in-the-middle tasks cut from real files at the places a user's cursor
// really is: the end of a line (the next line is the middle), just after an
// opening bracket, in the middle of an expression (the rest of the line is the
// middle), and on a blank line inside a block (the whole line is the middle).
// Seeded, so a run on another machine cuts the same tasks from the same files.
import { extname } from 'node:path';

export type CursorKind = 'end-of-line' | 'after-bracket' | 'mid-expression' | 'blank-in-block';
export const cursorKinds: readonly CursorKind[] = ['end-of-line', 'after-bracket', 'mid-expression', 'blank-in-block'];

export interface SourceFile {
  /** The path the model sees (relative to the workspace folder). */
  path: string;
  text: string;
  languageId: string;
}

export interface FimTask {
  file: string;
  languageId: string;
  kind: CursorKind;
  /** 1-based line and 0-based column of the cursor. */
  line: number;
  col: number;
  prefix: string;
  /** The code that was really there, which the completion is judged against. */
  middle: string;
  suffix: string;
}

const languages: Record<string, string> = {
  '.ts': 'typescript', '.tsx': 'typescriptreact', '.js': 'javascript', '.mjs': 'javascript', '.cjs': 'javascript', '.jsx': 'javascriptreact',
  '.py': 'python', '.go': 'go', '.rs': 'rust', '.java': 'java', '.kt': 'kotlin', '.c': 'c', '.h': 'c', '.cc': 'cpp', '.cpp': 'cpp',
  '.hpp': 'cpp', '.cu': 'cuda-cpp', '.cs': 'csharp', '.rb': 'ruby', '.php': 'php', '.swift': 'swift', '.scala': 'scala', '.lua': 'lua',
  '.sh': 'shellscript', '.css': 'css', '.scss': 'scss', '.vue': 'vue', '.svelte': 'svelte', '.zig': 'zig', '.dart': 'dart',
};

/** The VS Code language id of a source file by its extension; undefined for files that are not code. */
export function languageOf(path: string): string | undefined {
  return languages[extname(path).toLowerCase()];
}

/** A seeded generator in [0, 1) (mulberry32): the same tasks on every machine. */
export function seeded(seed: number): () => number {
  let s = seed | 0;
  return () => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const indentOf = (line: string): number => line.length - line.trimStart().length;
const isCode = (line: string): boolean => {
  const t = line.trim();
  return t.length >= 4 && !/^(\/\/|#|\*|\/\*|--|<!--)/.test(t);
};

interface Cut {
  line: number;
  col: number;
  /** Offsets of the middle in the file: [from, to). */
  from: number;
  to: number;
}

/** Every place of `kind` in the file (lines 0-based), within the middle 90 % of it (a cursor has context both ways). */
export function candidates(lines: string[], kind: CursorKind): Cut[] {
  const starts: number[] = [];
  let at = 0;
  for (const l of lines) {
    starts.push(at);
    at += l.length + 1;
  }
  const out: Cut[] = [];
  const first = Math.max(1, Math.floor(lines.length * 0.05));
  const last = Math.min(lines.length - 1, Math.ceil(lines.length * 0.95));
  for (let i = first; i < last; i++) {
    const l = lines[i];
    if (!isCode(l) || l.length > 160) continue;
    const ind = indentOf(l);
    if (kind === 'end-of-line') {
      // The user just finished line i - 1 and the next line is to come.
      if (isCode(lines[i - 1])) out.push({ line: i - 1, col: lines[i - 1].length, from: starts[i] - 1, to: starts[i] + l.length });
    } else if (kind === 'blank-in-block') {
      // An indented line between two lines at least as indented: the cursor waits after the indentation.
      if (ind > 0 && indentOf(lines[i - 1]) <= ind && lines[i - 1].trim() !== '' && lines[i + 1]?.trim() !== '' && indentOf(lines[i + 1] ?? '') >= ind) {
        out.push({ line: i, col: ind, from: starts[i] + ind, to: starts[i] + l.length });
      }
    } else if (kind === 'after-bracket') {
      for (let c = ind; c < l.length - 2; c++) {
        if ('([{'.includes(l[c]) && !')]}'.includes(l[c + 1])) out.push({ line: i, col: c + 1, from: starts[i] + c + 1, to: starts[i] + l.length });
      }
    } else {
      // After a word, an operator or a dot, a third of the way into the code or more, with some of the line left.
      for (let c = ind + Math.ceil((l.length - ind) / 3); c < l.length - 3; c++) {
        if (/[\w)\]]/.test(l[c - 1]) && /[\s.=+\-*/<>,]/.test(l[c])) out.push({ line: i, col: c, from: starts[i] + c, to: starts[i] + l.length });
      }
    }
  }
  return out;
}

/**
 * `count` tasks from `files`: files drawn at random (each language in turn, so
 * a workspace of mostly one language still gives the others their share), each
 * kind of cursor in turn, one task per file until every file has given one.
 */
export function cutTasks(files: readonly SourceFile[], count: number, seed: number): FimTask[] {
  const rand = seeded(seed);
  const byLanguage = new Map<string, SourceFile[]>();
  for (const f of files) byLanguage.set(f.languageId, [...(byLanguage.get(f.languageId) ?? []), f]);
  const pools = [...byLanguage.keys()].sort().map((k) => byLanguage.get(k)!.slice());
  const tasks: FimTask[] = [];
  const used = new Map<string, number>();
  let round = 0;
  for (let misses = 0; tasks.length < count && misses < 4 * files.length + 8; round++) {
    const pool = pools[round % pools.length];
    if (!pool?.length) {
      misses++;
      continue;
    }
    const file = pool[Math.floor(rand() * pool.length)];
    const kind = cursorKinds[tasks.length % cursorKinds.length];
    const lines = file.text.split('\n');
    const places = candidates(lines, kind);
    // A file gives another task only once every file of its language has given one.
    const times = used.get(file.path) ?? 0;
    if (places.length === 0 || times > Math.min(...pool.map((f) => used.get(f.path) ?? 0))) {
      misses++;
      continue;
    }
    const cut = places[Math.floor(rand() * places.length)];
    used.set(file.path, times + 1);
    tasks.push({
      file: file.path,
      languageId: file.languageId,
      kind,
      line: cut.line + 1,
      col: cut.col,
      prefix: file.text.slice(0, cut.from),
      middle: file.text.slice(cut.from, cut.to),
      suffix: file.text.slice(cut.to),
    });
  }
  return tasks;
}

/** The completion cut to as many lines as the middle has, which is what it is judged on. */
export function sameLines(completion: string, middle: string): string {
  const n = middle.split('\n').length;
  return completion.split('\n').slice(0, n).join('\n');
}
