// Server-sent events as OpenAI-compatible servers stream them: `data: {...}`
// lines, an event per blank line, `data: [DONE]` at the end. Follows the
// WHATWG parsing rules that matter here (CR, LF or CRLF line ends; several
// `data:` lines join with \n; `:` comments and other fields ignored; one
// optional space after the colon), and dispatches a last event that has no
// blank line after it, since some servers end the stream without one.
// Hand-written rather than a dependency: it is this one function, and the
// server is bundled into a single file.

/** The `data` of each event in `chunks` (a response body decoded as text), as they complete. */
export async function* sseEvents(chunks: AsyncIterable<string>): AsyncGenerator<string> {
  let buffer = '';
  let data: string[] = [];
  for await (const chunk of chunks) {
    buffer += chunk;
    let end: number;
    while ((end = lineEnd(buffer)) >= 0) {
      const line = buffer.slice(0, end);
      // A CR at the very end may be the first half of a CRLF: wait for the next chunk.
      if (buffer[end] === '\r' && end + 1 === buffer.length) break;
      buffer = buffer.slice(end + (buffer[end] === '\r' && buffer[end + 1] === '\n' ? 2 : 1));
      if (line === '') {
        if (data.length > 0) yield data.join('\n');
        data = [];
      } else if (line.startsWith('data:')) {
        data.push(line.slice(line[5] === ' ' ? 6 : 5));
      }
    }
  }
  if (buffer.startsWith('data:')) data.push(buffer.slice(buffer[5] === ' ' ? 6 : 5));
  if (data.length > 0) yield data.join('\n');
}

function lineEnd(s: string): number {
  const lf = s.indexOf('\n');
  const cr = s.indexOf('\r');
  if (cr < 0) return lf;
  if (lf < 0) return cr;
  return Math.min(cr, lf);
}

/** A fetch Response body as text chunks (UTF-8 sequences split across reads are kept whole). */
export async function* textChunks(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const text = decoder.decode(value, { stream: true });
      if (text) yield text;
    }
    const rest = decoder.decode();
    if (rest) yield rest;
  } finally {
    reader.releaseLock();
  }
}
