// `npm run demo`: the main job on the embedded default model, through the real
// language server and engine. Types a function into a sample file one key at a
// time, asks for an inline completion after each key as an editor would, and
// prints the ghost text with its latency (time to first token, ms/token,
// accepted tokens per step, prompt tokens reused from the engine's cache).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { repoRoot, TestClient, type Metrics } from './integration/lspClient';

const sample = join(repoRoot, 'test', 'e2e', 'workspace', 'example.py');
const typed = 'def is_prime(n: int) -> bool:\n    if n < 2:\n        return False\n    for i in range(2, ';

const median = (xs: number[]) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] : NaN);
const fmt = (x: number | undefined, digits = 1) => (x === undefined || Number.isNaN(x) ? '–' : x.toFixed(digits));

async function main(): Promise<void> {
  const client = new TestClient({ maxTokens: 64, deadlineMs: 2000 });
  const started = Date.now();
  try {
    await client.initialize(join(repoRoot, 'test', 'e2e', 'workspace'));
    const status = await client.waitReady(120000);
    console.log(`engine ready in ${Date.now() - started} ms: ${status.model} on ${status.backend}`);
    const base = readFileSync(sample, 'utf8') + '\n\n';
    const uri = pathToFileURL(sample).href;
    client.open(uri, base);
    let shown = '';
    for (let n = 1; n <= typed.length; n++) {
      const text = base + typed.slice(0, n);
      client.replace(uri, text);
      const lines = text.split('\n');
      const result = await client.complete(uri, lines.length - 1, lines[lines.length - 1].length);
      shown = result?.items[0] ? String(result.items[0].insertText) : '';
    }
    await new Promise((r) => setTimeout(r, 50));
    const engine = client.metrics.filter((m: Metrics) => m.source === 'engine');
    const last = engine[engine.length - 1];
    console.log(`\ntyped ${typed.length} keys into ${sample}:\n\n${typed}\x1b[2m${shown}\x1b[0m\n`);
    console.log(`completions: ${client.metrics.length} (${engine.length} from the engine, ${client.metrics.length - engine.length} from the type-through cache)`);
    console.log(`time to first token: p50 ${fmt(median(engine.map((m) => m.ttftMs!)))} ms`);
    console.log(`decode: p50 ${fmt(median(engine.filter((m) => (m.tokens ?? 0) > 1).map((m) => m.decodeMsPerToken!)), 2)} ms/token, ${fmt(median(engine.map((m) => m.acceptedPerStep!)), 2)} tokens/step`);
    const prompt = engine.reduce((s, m) => s + (m.promptTokens ?? 0), 0);
    const reused = engine.reduce((s, m) => s + (m.reusedTokens ?? 0), 0);
    console.log(`prompt tokens reused from the engine's KV cache: ${reused} of ${prompt} (${fmt((100 * reused) / Math.max(prompt, 1))}%)`);
    console.log(`last completion: ${last?.tokens} tokens, ${fmt(last?.servedMs)} ms request → text, backend ${last?.backend}`);
  } finally {
    await client.close();
  }
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
