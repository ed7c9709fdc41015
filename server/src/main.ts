// dist/server.js: the language server (LSP on --stdio or Node IPC), or with
// `--api HOST:PORT` the local OpenAI-compatible API alone (api/headless.ts).
const at = process.argv.indexOf('--api');
if (at >= 0) {
  void import('./api/headless')
    .then((m) => m.serveHeadless(process.argv[at + 1] ?? ''))
    .catch((err: Error) => {
      process.stderr.write(`runahead: ${err.message}\n`);
      process.exit(2);
    });
} else {
  void import('./server');
}
