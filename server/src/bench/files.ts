// The source files of a workspace folder that the benchmark may cut tasks
// from: what git tracks or would track (.gitignore respected), else a walk that
// reads the folder's .gitignore; minus the editor's `files.exclude` globs,
// generated or minified files, and the packages kept for outside evaluation.
import { execFile } from 'node:child_process';
import { readdir, readFile, stat } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import { promisify } from 'node:util';
import ignore from 'ignore';
import { languageOf, type SourceFile } from './tasks';

/**
 * Packages never used as tasks (RESERVED.md: judged from outside, so never
 * trained, tuned or evaluated on), matched as a path segment anywhere.
 */
export const reservedPackages = [
  'paramiko', 'dulwich', 'docutils', 'twisted', 'sqlalchemy', 'mercurial',
  'express', 'zod', 'date-fns', 'koa', 'fastify', 'rxjs',
  'cobra', 'mux', 'clap', 'serde_json',
];

const MIN_BYTES = 400;
const MAX_BYTES = 200_000;
const MAX_FILES = 2000;

/** True when some segment of `path` names a reserved package (`node_modules/express/...`, `site-packages/twisted/...`, `spf13/cobra`). */
export function isReserved(path: string): boolean {
  return path.split(/[\\/]/).some((segment) => reservedPackages.includes(segment.toLowerCase().replace(/[-_]?\d[\d.]*$/, '')));
}

/** Whether a file's text looks generated or minified (very long lines). */
function looksGenerated(text: string): boolean {
  const lines = text.split('\n');
  return lines.some((l) => l.length > 1000) || text.length / Math.max(lines.length, 1) > 200;
}

async function gitFiles(root: string): Promise<string[] | undefined> {
  try {
    const { stdout } = await promisify(execFile)('git', ['ls-files', '--cached', '--others', '--exclude-standard', '-z'], { cwd: root, maxBuffer: 64 << 20 });
    return stdout.split('\0').filter(Boolean);
  } catch {
    return undefined;
  }
}

async function walkedFiles(root: string): Promise<string[]> {
  const ig = ignore().add(['.git', 'node_modules']);
  try {
    ig.add(await readFile(join(root, '.gitignore'), 'utf8'));
  } catch {
    // no .gitignore
  }
  const out: string[] = [];
  const walk = async (dir: string): Promise<void> => {
    for (const entry of (await readdir(dir, { withFileTypes: true }).catch(() => [])).sort((a, b) => a.name.localeCompare(b.name))) {
      if (out.length >= 4 * MAX_FILES) return;
      const rel = relative(root, join(dir, entry.name)).split(sep).join('/');
      if (entry.isDirectory() ? ig.ignores(`${rel}/`) : ig.ignores(rel)) continue;
      if (entry.isDirectory()) await walk(join(dir, entry.name));
      else if (entry.isFile()) out.push(rel);
    }
  };
  await walk(root);
  return out;
}

/** Source files under `root`, with paths relative to it; `exclude` holds `files.exclude` globs (those set to true). */
export async function workspaceFiles(root: string, exclude: readonly string[] = []): Promise<SourceFile[]> {
  const listed = (await gitFiles(root)) ?? (await walkedFiles(root));
  const excluded = ignore().add(exclude.map((g) => g.replace(/^\*\*\//, '')));
  const out: SourceFile[] = [];
  for (const path of listed.sort()) {
    if (out.length >= MAX_FILES) break;
    const languageId = languageOf(path);
    if (!languageId || excluded.ignores(path) || isReserved(path) || /\.min\.|\.d\.ts$|\.generated\./.test(path)) continue;
    const full = join(root, path);
    const size = (await stat(full).catch(() => undefined))?.size ?? 0;
    if (size < MIN_BYTES || size > MAX_BYTES) continue;
    const text = await readFile(full, 'utf8').catch(() => '');
    if (text.includes('\0') || looksGenerated(text)) continue;
    out.push({ path, text, languageId });
  }
  return out;
}
