// The log grammar (syntaxes/runahead-log.tmLanguage.json) run by the same
// TextMate engine VS Code uses, on lines the extension and server write.
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as oniguruma from 'vscode-oniguruma';
import * as textmate from 'vscode-textmate';
import { metricsLine } from '../../extension/src/format';
import { repoRoot } from './helpers';

let grammar: textmate.IGrammar;

before(async () => {
  const wasm = readFileSync(require.resolve('vscode-oniguruma/release/onig.wasm')).buffer;
  await oniguruma.loadWASM(wasm);
  const registry = new textmate.Registry({
    onigLib: Promise.resolve({ createOnigScanner: (p) => new oniguruma.OnigScanner(p), createOnigString: (s) => new oniguruma.OnigString(s) }),
    loadGrammar: async (scope) =>
      scope === 'text.runahead.log' ? textmate.parseRawGrammar(readFileSync(join(repoRoot, 'syntaxes', 'runahead-log.tmLanguage.json'), 'utf8'), 'runahead-log.tmLanguage.json') : null,
  });
  grammar = (await registry.loadGrammar('text.runahead.log'))!;
});

/** The scopes of the first token that covers `text` in `line`. */
function scopesOf(line: string, text: string): string[] {
  const at = line.indexOf(text);
  assert.ok(at >= 0, `"${text}" not in the line`);
  const { tokens } = grammar.tokenizeLine(line, textmate.INITIAL);
  const tok = tokens.find((t) => t.startIndex <= at && at < t.endIndex)!;
  return tok.scopes;
}

describe('log grammar', () => {
  const line = `2026-11-29 10:59:00.123 [info] ${metricsLine({ source: 'engine', cacheHit: false, servedMs: 31.4, debounceMs: 20, chars: 40, ttftMs: 12.3, decodeMsPerToken: 0.91, acceptedPerStep: 4.08, tokens: 37, promptTokens: 830, reusedTokens: 812, finishReason: 'stop' })}`;

  it('highlights ms/token, accepted/step and TTFT as numbers', () => {
    assert.ok(scopesOf(line, '0.91').includes('constant.numeric.ms-per-token.runahead'), scopesOf(line, '0.91').join(' '));
    assert.ok(scopesOf(line, '4.08').includes('constant.numeric.accepted-per-step.runahead'));
    assert.ok(scopesOf(line, '12.3').includes('constant.numeric.ttft.runahead'));
    assert.ok(scopesOf(line, '2026-11-29').includes('comment.line.timestamp.runahead'));
  });

  it('marks warnings and errors', () => {
    const warn = '2026-11-29 10:59:01.000 [warning] status restarting: engine killed by SIGKILL; restarting';
    assert.ok(scopesOf(warn, '[warning]').includes('markup.changed.level.warning.runahead'));
    const err = '2026-11-29 10:59:02.000 [error] no engine binary at /x/runahead-engine: run `npm install`';
    assert.ok(scopesOf(err, '[error]').includes('invalid.illegal.level.error.runahead'));
    assert.ok(scopesOf(err, 'no engine binary').includes('invalid.illegal.error.runahead'));
  });

  it('does not highlight numbers inside paths', () => {
    const load = '2026-11-29 10:59:03.000 [info] engine /opt/run-3s/runahead-engine · model /home/u/.cache/huggingface/hub/models--Qwen--Qwen2.5-Coder-1.5B/snapshots/8a1f/ 2 ms';
    for (const inside of ['3s', '2.5', '1.5B']) {
      const scopes = scopesOf(load, inside);
      assert.ok(scopes.includes('string.unquoted.path.runahead'), `${inside}: ${scopes.join(' ')}`);
      assert.ok(!scopes.some((x) => x.startsWith('constant.numeric')), `${inside}: ${scopes.join(' ')}`);
    }
    const win = '2026-11-29 10:59:03.000 [info] model C:\\models\\qwen2.5-coder-7b loaded in 4 s';
    assert.ok(scopesOf(win, '2.5').includes('string.unquoted.path.runahead'));
    assert.ok(scopesOf(win, '4').includes('constant.numeric.runahead'), 'a figure after the path is still one');
    // Units with a slash are not paths.
    assert.ok(scopesOf(line, '0.91').includes('constant.numeric.ms-per-token.runahead'));
    assert.ok(scopesOf(line, '812').includes('constant.numeric.runahead'));
  });
});

