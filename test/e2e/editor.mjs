#!/usr/bin/env node
// `npm run editor [-- FOLDER] [--port N] [--host H]`: VS Code in the browser
// (code-server) with the freshly packaged Runahead extension, for trying
// Runahead on a machine without VS Code. Opens FOLDER, or a scratch copy of
// the sample workspace (test/e2e/workspace). Ctrl-C stops everything it started.
import { rmSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { chooseModel, installExtension, makeRunDir, startCodeServer } from './codeServer.mjs';
import { ensureTools } from './tools.mjs';
import { buildVsix } from './vsix.mjs';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { port: { type: 'string' }, host: { type: 'string', default: '127.0.0.1' } },
});

const tools = ensureTools({ browser: false });
const vsix = buildVsix();
const model = chooseModel();
const folder = positionals[0] ? resolve(positionals[0]) : undefined;
const run = makeRunDir({
  settings: model.isDefault ? {} : { 'runahead.modelPath': model.path },
  ...(folder ? { workspace: folder, copyWorkspace: false } : {}),
});
installExtension(tools, run, vsix);
const server = await startCodeServer(tools, run, { host: values.host, port: values.port ? Number(values.port) : undefined });

let stopping = false;
async function shutdown() {
  if (stopping) return;
  stopping = true;
  console.log('\n[editor] stopping code-server …');
  await server.stop();
  rmSync(run.dir, { recursive: true, force: true });
  process.exit(0);
}
process.on('SIGINT', shutdown);
process.on('SIGTERM', shutdown);

console.log(`
  Runahead in VS Code (code-server) is running:

    ${server.url}?folder=${encodeURIComponent(run.workspace)}

  Workspace: ${run.workspace}${folder ? '' : ' (a scratch copy of test/e2e/workspace)'}
  Model:     ${model.path}${model.isDefault ? ' (embedded default)' : ' (FIXTURE: the default model is absent)'}
  Logs:      ${run.log}
  On a remote machine: ssh -L ${server.port}:127.0.0.1:${server.port} <host>, then open the URL locally.
  Press Ctrl-C to stop.
`);
