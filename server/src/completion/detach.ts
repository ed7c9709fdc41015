// A copy of a piece of a larger string. V8 keeps a slice as a view that holds its whole
// parent alive, so a cached line or tail of a document would keep that version of the
// whole document in memory (the reliability bench saw the heap grow by one document per
// request through the FIM line-count cache).
export function detach(piece: string): string {
  return JSON.parse(JSON.stringify(piece)) as string;
}
