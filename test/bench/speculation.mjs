#!/usr/bin/env node
// Speculative decoding on real code completion: fill-in-the-middle tasks cut at
// realistic cursor positions from real source files nobody here wrote (a seeded
// selection of .js/.ts files under node_modules/), tokenized with the model's
// tokenizer.json, run through the engine over its stdio protocol once per drafter
// (off, lookup, mtp, draft, auto). Prints mean accepted tokens per verify step and
// ms per output token for each, checks that every drafter's greedy output equals
// the plain one, and then runs a synthetic repetitive prompt to show how much it
// flatters speculation. A benchmark, not a test: it reports and never fails on speed.
// The agent-edit workload (--edit-tasks N, 0 skips it) rewrites a real selection
// with a small change (rename one identifier), prompted as Edit Selection with
// Instruction prompts: the file, the selection, the instruction (in the model's
// chat template when it has one); it reports tokens per step per drafter, and how
// much of the output reproduces the selection. Files of the packages in
// /work/shared/RESERVED.md are never used.
//
//   node test/bench/speculation.mjs [--model DIR] [--engine PATH] [--tasks 40] [--max-tokens 64]
//        [--threads 0] [--seed 1] [--modes off,lookup,mtp,draft,auto] [--fixed-k 4] [--edit-tasks 12] [--json OUT]
//        [--draft-model DIR]   (the draft model of `draft` and `auto`)
//        [--prompts-out FILE]  (writes the FIM tasks' token ids, for engine/bench/cpu/speculation_gate.cpp, and stops)
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Tokenizer } from '@huggingface/tokenizers';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const defaultModel = join(root, 'engine', 'models', 'runahead-coder');
const model = arg('model', existsSync(join(defaultModel, 'config.json')) ? defaultModel : join(root, 'test', 'fixtures', 'models', 'qwen2-tied-bf16'));
const engine = arg('engine', process.env.RUNAHEAD_ENGINE ?? join(root, 'engine', 'build', 'runahead-engine'));
const taskCount = Number(arg('tasks', 40));
const maxTokens = Number(arg('max-tokens', 64));
const threads = Number(arg('threads', 0));
const seed = Number(arg('seed', 1));
const modes = arg('modes', 'off,lookup,mtp,draft,auto').split(',');
for (const [what, p] of [['engine (node engine/setup.mjs)', engine], ['model', model]]) {
  if (!existsSync(p)) {
    console.error(`missing ${what}: ${p}`);
    process.exit(2);
  }
}

// A small seeded generator (mulberry32), so the selection is the same on every machine.
function rng(s) {
  return () => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// ---- tasks: FIM cuts from real files -------------------------------------------------
// Kept out of everything the project evaluates on (/work/shared/RESERVED.md).
const RESERVED = new Set(['express', 'zod', 'date-fns', 'koa', 'fastify', 'rxjs']);

function sourceFiles(dir, out = []) {
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    let st;
    try {
      st = statSync(p);
    } catch {
      continue;
    }
    if (st.isDirectory()) {
      if (name !== '.bin' && name !== 'test' && name !== 'tests' && !RESERVED.has(name)) sourceFiles(p, out);
    } else if (/\.(m?js|cjs|ts)$/.test(name) && !/\.min\.js$|\.d\.ts$/.test(name) && st.size > 3000 && st.size < 150_000) {
      out.push(p);
    }
  }
  return out;
}

const json = JSON.parse(readFileSync(join(model, 'tokenizer.json'), 'utf8'));
const tokConfigPath = join(model, 'tokenizer_config.json');
const tokenizer = new Tokenizer(json, existsSync(tokConfigPath) ? JSON.parse(readFileSync(tokConfigPath, 'utf8')) : {});
const vocab = tokenizer.get_vocab(true);
const encode = (text) => (text ? tokenizer.encode(text, { add_special_tokens: false }).ids : []);
const special = (t) => vocab.get(t);
const config = JSON.parse(readFileSync(join(model, 'config.json'), 'utf8'));
const fimOrder = config.runahead?.fim_order ?? 'psm';
const [fimPrefix, fimSuffix, fimMiddle] = ['<|fim_prefix|>', '<|fim_suffix|>', '<|fim_middle|>'].map(special);
const haveFim = fimPrefix !== undefined && fimSuffix !== undefined && fimMiddle !== undefined;

function fimPrompt(prefix, suffix) {
  const p = encode(prefix).slice(-1024);
  const s = encode(suffix).slice(0, 256);
  if (!haveFim) return p;  // a model without FIM tokens completes left to right
  return fimOrder === 'spm' ? [fimSuffix, ...s, fimPrefix, ...p, fimMiddle] : [fimPrefix, ...p, fimSuffix, ...s, fimMiddle];
}

function makeTasks() {
  const rand = rng(seed);
  const files = sourceFiles(join(root, 'node_modules'));
  const tasks = [];
  const used = new Set();
  while (tasks.length < taskCount && used.size < files.length) {
    const file = files[Math.floor(rand() * files.length)];
    if (used.has(file)) continue;
    used.add(file);
    const text = readFileSync(file, 'utf8');
    const lines = text.split('\n');
    // A cursor in the middle 80 % of the file, on a line with code: at its start
    // (after the indentation) or inside it, as a user typing there would be.
    const candidates = [];
    for (let i = Math.floor(lines.length * 0.1); i < Math.floor(lines.length * 0.9); i++) if (lines[i].trim().length >= 8) candidates.push(i);
    if (candidates.length === 0) continue;
    const line = candidates[Math.floor(rand() * candidates.length)];
    const indent = lines[line].length - lines[line].trimStart().length;
    const col = rand() < 0.5 ? indent : indent + 1 + Math.floor(rand() * (lines[line].length - indent - 1));
    const offset = lines.slice(0, line).reduce((n, l) => n + l.length + 1, 0) + col;
    tasks.push({ file: relative(root, file), line: line + 1, col, prompt: fimPrompt(text.slice(0, offset), text.slice(offset)) });
  }
  return tasks;
}

// ---- the engine over its protocol ----------------------------------------------------
class Engine {
  constructor(path) {
    this.child = spawn(path, [], { stdio: ['pipe', 'pipe', 'inherit'] });
    this.waiting = new Map();
    this.tokens = new Map();
    createInterface({ input: this.child.stdout }).on('line', (line) => this.onLine(JSON.parse(line)));
  }
  onLine(m) {
    if (m.type === 'tokens') {
      this.tokens.get(m.id)?.push(...m.tokens);
      return;
    }
    if (m.type === 'load_progress') return;
    const key = m.id ?? m.type;
    const w = this.waiting.get(key);
    if (!w) return;
    this.waiting.delete(key);
    if (m.type === 'error') w.reject(new Error(`${m.code}: ${m.message}`));
    else w.resolve(m);
  }
  request(msg) {
    return new Promise((resolve, reject) => {
      this.waiting.set(msg.id ?? msg.type, { resolve, reject });
      this.child.stdin.write(`${JSON.stringify(msg)}\n`);
    });
  }
  async generate(id, prompt, max = maxTokens) {
    this.tokens.set(id, []);
    const done = await this.request({ type: 'generate', id, prompt, params: { max_tokens: max, temperature: 0 } });
    const tokens = this.tokens.get(id);
    this.tokens.delete(id);
    return { tokens, done };
  }
  close() {
    this.child.stdin.end(`${JSON.stringify({ type: 'shutdown' })}\n`);
  }
}

// One engine per variant, all loaded at once; each task runs on every variant in turn, so
// a machine that gets busier during the run slows every variant alike.
async function runVariants(variants, tasks, label) {
  const results = [];
  for (const v of variants) {
    const e = new Engine(engine);
    const hello = await e.request({ type: 'hello' });
    const r = { mode: v.name, capabilities: hello.capabilities.speculation, engine: e, outputs: [], tokens: 0, steps: 0,
      decodeTokens: 0, decodeMs: 0, drafted: 0, accepted: 0, verify_steps: 0, by_drafter: {} };
    try {
      const loaded = await e.request({ type: 'load', id: 'load', model, options: { threads, ...v.options } });
      r.speculation = loaded.report.speculation;
    } catch (err) {
      r.error = err.message;
      e.close();
    }
    results.push(r);
  }
  for (let i = 0; i < tasks.length; i++) {
    for (const r of results) {
      if (r.error) continue;
      const { tokens: out, done } = await r.engine.generate(`${label}-${r.mode}-${i}`, tasks[i].prompt, tasks[i].maxTokens);
      const s = done.stats;
      r.outputs.push(out);
      r.tokens += s.tokens;
      r.steps += s.steps;
      // Decode steps produce every token but the first (which comes from the prefill).
      const produced = s.steps > 0 ? Math.round(s.accepted_per_step * s.steps) : 0;
      r.decodeTokens += produced;
      r.decodeMs += s.decode_ms_per_token * produced;
      if (s.speculation) {
        r.drafted += s.speculation.drafted;
        r.accepted += s.speculation.accepted;
        r.verify_steps += s.speculation.steps;
        for (const [name, c] of Object.entries(s.speculation.by_drafter)) {
          const b = (r.by_drafter[name] ??= { steps: 0, drafted: 0, accepted: 0 });
          b.steps += c.steps;
          b.drafted += c.drafted;
          b.accepted += c.accepted;
        }
      }
    }
  }
  for (const r of results) {
    if (!r.error) r.engine.close();
    delete r.engine;
    r.tokens_per_step = r.decodeTokens / Math.max(r.steps, 1);
    r.ms_per_token = r.decodeMs / Math.max(r.decodeTokens, 1);
  }
  return results;
}

function table(results, baseline) {
  const rows = [['drafter', 'tokens', 'steps', 'tokens/step', 'ms/token', 'speed-up', 'drafted', 'accepted', 'same output']];
  for (const r of results) {
    if (r.error) {
      rows.push([r.mode, `not active: ${r.error}`]);
      continue;
    }
    const same = baseline ? r.outputs.filter((o, i) => JSON.stringify(o) === JSON.stringify(baseline.outputs[i])).length : r.outputs.length;
    rows.push([r.mode, r.tokens, r.steps, r.tokens_per_step.toFixed(3), r.ms_per_token.toFixed(3),
      baseline ? `${(baseline.ms_per_token / r.ms_per_token).toFixed(2)}x` : '', r.drafted, r.accepted, `${same}/${r.outputs.length}`]);
  }
  for (const row of rows) console.log(row.map((c, i) => String(c).padEnd(i === 0 ? 12 : 11)).join(' '));
}

const fixedK = Number(arg('fixed-k', 4));
const draftModel = arg('draft-model');
const variants = [];
for (const mode of modes) {
  const options = { speculation: mode, ...(draftModel && (mode === 'draft' || mode === 'auto') ? { draft_model: draftModel } : {}) };
  variants.push({ name: mode, options });
  if (mode !== 'off' && fixedK > 0) variants.push({ name: `${mode}@k${fixedK}`, options: { ...options, max_draft: fixedK, adaptive_depth: false } });
}

const tasks = makeTasks();
if (arg('prompts-out')) {
  writeFileSync(arg('prompts-out'), JSON.stringify(tasks.map((t) => t.prompt)));
  process.exit(0);
}
console.log(`model ${relative(root, model) || model}; ${tasks.length} FIM tasks (${fimOrder}, ${haveFim ? 'FIM tokens' : 'left to right'}) from node_modules, seed ${seed}; ` +
  `prompt tokens mean ${(tasks.reduce((n, t) => n + t.prompt.length, 0) / tasks.length).toFixed(0)}; max_tokens ${maxTokens}; greedy; threads ${threads || 'auto'}`);
console.log(`variants: each mode with adaptive depth (max_draft 8), and @k${fixedK}: always ${fixedK} drafted tokens (adaptive_depth false)` +
  (draftModel ? `; draft model ${draftModel}` : ''));
const results = await runVariants(variants, tasks, 'fim');
const baseline = results.find((r) => r.mode === 'off' && !r.error);
console.log('\nreal code (FIM from node_modules):');
table(results, baseline);
const costs = results.find((r) => r.speculation?.cost)?.speculation.cost;
if (costs) console.log(`\ncost table (verify width 1..${costs.ratio.length}, ratio to a 1-token step): ${costs.ratio.join(' ')}`);

// The synthetic case: a block of code repeated, then its start again. Lookup sees the answer.
const block = (name) => `function ${name}(a, b) {\n  const sum = a + b;\n  console.log("sum", sum);\n  return sum;\n}\n\n`;
const synthetic = ['add', 'plus', 'total', 'combine', 'merge'].map((name) => ({ file: 'synthetic', prompt: encode(block(name).repeat(12) + `function ${name}(a, b) {\n`) }));
const synth = await runVariants(variants, synthetic, 'synthetic');
console.log('\nsynthetic repetitive prompts (5 blocks, each repeated 12 times):');
table(synth, synth.find((r) => r.mode === 'off' && !r.error));

// ---- agent edits: rewrite a real selection with a small change -------------------------
const editCount = Number(arg('edit-tasks', 12));
const chatTemplate = (() => {
  const t = existsSync(tokConfigPath) ? JSON.parse(readFileSync(tokConfigPath, 'utf8')).chat_template : undefined;
  return typeof t === 'string' ? t : undefined;
})();

async function editPrompt(file, before, selection, after, instruction) {
  // The same prompt text as extension/src/chat/edit.ts (editMessages).
  const user = `File ${file}:\n${before.slice(-6000)}<selection>\n${selection}\n</selection>${after.slice(0, 6000)}\n\nThe selection:\n${selection}\n\nInstruction: ${instruction}\nRewrite the selection.`;
  const system = 'You edit code. Reply with the rewritten selection only: no explanation, no code fences, the same indentation as the original.';
  if (chatTemplate) {
    const { Template } = await import('@huggingface/jinja');
    return encode(new Template(chatTemplate).render({ messages: [{ role: 'system', content: system }, { role: 'user', content: user }], add_generation_prompt: true, bos_token: '', eos_token: '' }));
  }
  // A completion model has no chat turns: the same parts as plain text, ending where the rewrite starts.
  return encode(`${system}\n\n${user}\n\nRewritten selection:\n`);
}

async function makeEditTasks() {
  const rand = rng(seed + 1);
  const files = sourceFiles(join(root, 'node_modules'));
  const tasks = [];
  const used = new Set();
  while (tasks.length < editCount && used.size < files.length) {
    const file = files[Math.floor(rand() * files.length)];
    if (used.has(file)) continue;
    used.add(file);
    const text = readFileSync(file, 'utf8');
    const lines = text.split('\n');
    if (lines.length < 60) continue;
    const start = Math.floor(lines.length * 0.1) + Math.floor(rand() * lines.length * 0.7);
    const selectionLines = lines.slice(start, start + 12 + Math.floor(rand() * 12));
    const selection = selectionLines.join('\n');
    // The small change: rename an identifier used at least twice in the selection.
    const words = [...new Set(selection.match(/\b[a-zA-Z_][a-zA-Z0-9_]{3,}\b/g) ?? [])].filter((w) => selection.split(w).length > 2 && !/^(this|return|const|function|null|true|false|undefined|else|typeof)$/.test(w));
    if (words.length === 0 || selection.length > 2000) continue;
    const word = words[Math.floor(rand() * words.length)];
    const before = lines.slice(0, start).join('\n') + '\n';
    const after = '\n' + lines.slice(start + selectionLines.length).join('\n');
    const expected = selection.replaceAll(word, `${word}Next`);
    const prompt = await editPrompt(relative(root, file), before, selection, after, `rename ${word} to ${word}Next`);
    tasks.push({ file: relative(root, file), line: start + 1, prompt, expected: encode(expected), maxTokens: encode(expected).length + 8 });
  }
  return tasks;
}

let edits;
if (editCount > 0) {
  const editTasks = await makeEditTasks();
  console.log(`\nagent edits: ${editTasks.length} selections of 12-23 lines from node_modules, each with one identifier renamed; ` +
    `prompt tokens mean ${(editTasks.reduce((n, t) => n + t.prompt.length, 0) / editTasks.length).toFixed(0)}; ${chatTemplate ? 'the chat template' : 'no chat template: plain-text prompt'}; greedy`);
  edits = await runVariants(variants, editTasks, 'edit');
  table(edits, edits.find((r) => r.mode === 'off' && !r.error));
  // How much of the rewrite the model reproduced: the longest common prefix with the expected rewrite, in tokens.
  const off = edits.find((r) => !r.error);
  const common = off.outputs.map((o, i) => {
    let k = 0;
    while (k < o.length && o[k] === editTasks[i].expected[k]) k++;
    return k / editTasks[i].expected.length;
  });
  console.log(`output matches the expected rewrite for a mean ${(100 * common.reduce((a, b) => a + b, 0) / common.length).toFixed(0)} % of its tokens (prefix)`);
}

const out = arg('json');
if (out) writeFileSync(out, JSON.stringify({ model, tasks: tasks.map(({ file, line, col, prompt }) => ({ file, line, col, prompt_tokens: prompt.length })), results, synthetic: synth, edits }, null, 1));
