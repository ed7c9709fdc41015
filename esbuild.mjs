#!/usr/bin/env node
// Bundles the language server (dist/server.js) and the VS Code extension
// (dist/extension.js) into single CommonJS files, so the .vsix and the
// standalone server need no node_modules. `--watch` rebuilds on change.
import * as esbuild from 'esbuild';

const common = {
  bundle: true,
  platform: 'node',
  target: 'node20',
  format: 'cjs',
  sourcemap: true,
  logLevel: 'warning',
};

const builds = [
  { ...common, entryPoints: ['server/src/main.ts'], outfile: 'dist/server.js' },
  { ...common, entryPoints: ['extension/src/extension.ts'], outfile: 'dist/extension.js', external: ['vscode'] },
  // The benchmark webview's script (extension/src/bench/view.ts): runs in the webview, not in Node.
  { ...common, platform: 'browser', format: 'iife', target: 'es2022', sourcemap: false, entryPoints: ['extension/src/bench/view.ts'], outfile: 'dist/benchView.js' },
];

if (process.argv.includes('--watch')) {
  for (const b of builds) await (await esbuild.context(b)).watch();
} else {
  await Promise.all(builds.map((b) => esbuild.build(b)));
}
