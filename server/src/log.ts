// Where the server's parts write log lines (the LSP front end sends them to the editor's output).
export type Log = (level: 'info' | 'warn' | 'error', line: string) => void;
