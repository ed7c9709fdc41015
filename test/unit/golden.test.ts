// Golden cases for the post-processing filters: test/unit/golden/<filter>/*.txt
// (format in golden/README.md). Each file is one test.
import { strict as assert } from 'node:assert';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { filters, postprocess } from '../../server/src/completion/postprocess';
import type { FilterContext } from '../../server/src/completion/postprocess/context';

const root = join(__dirname, 'golden');
const CURSOR = '║';

export interface GoldenCase {
  description: string;
  ctx: FilterContext;
  completion: string;
  expected: string;
}

export function parseGolden(text: string, file: string): GoldenCase {
  const lines = text.replace(/\n$/, '').split('\n');
  const headers: Record<string, string> = {};
  const sections: Record<string, string[]> = {};
  let current: string[] | undefined;
  for (const line of lines) {
    const h = /^--- (\w+)$/.exec(line);
    if (h) sections[h[1]] = current = [];
    else if (current) current.push(line);
    else {
      const m = /^(\w+):\s*(.*)$/.exec(line);
      if (m) headers[m[1]] = m[2];
    }
  }
  for (const s of ['document', 'completion', 'expected']) assert.ok(sections[s], `${file}: no "--- ${s}" section`);
  const doc = sections.document.join('\n');
  const at = doc.indexOf(CURSOR);
  assert.ok(at >= 0, `${file}: the document has no ${CURSOR} cursor`);
  return {
    description: headers.description ?? file,
    ctx: { prefix: doc.slice(0, at), suffix: doc.slice(at + CURSOR.length), languageId: headers.language ?? 'plaintext' },
    completion: sections.completion.join('\n'),
    expected: sections.expected.join('\n'),
  };
}

describe('post-processing golden cases', () => {
  const folders = readdirSync(root, { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name);

  it('has a golden folder for every filter, with cases in it', () => {
    for (const name of Object.keys(filters)) assert.ok(folders.includes(name), `no test/unit/golden/${name}/`);
  });

  for (const folder of folders) {
    const run = folder === 'postprocess' ? postprocess : filters[folder];
    describe(folder, () => {
      it('names a filter', () => assert.ok(run, `test/unit/golden/${folder}/ names no filter in server/src/completion/postprocess`));
      for (const file of readdirSync(join(root, folder)).filter((f) => f.endsWith('.txt')).sort()) {
        const c = parseGolden(readFileSync(join(root, folder, file), 'utf8'), `${folder}/${file}`);
        it(`${file}: ${c.description}`, () => assert.equal(run(c.completion, c.ctx), c.expected));
      }
    });
  }
});
