// What the server knows of the editor's workspace, for the prompt: its
// folders (the path and repository name the model sees for a document) and
// chunks of recently opened and edited files.
import { basename, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { WorkspaceFolder } from 'vscode-languageserver';
import { RecentChunks, type Chunk } from './completion/contextChunks';

export class Workspace {
  folders: WorkspaceFolder[] = [];
  private readonly recent = new RecentChunks();
  /** The line of each document's last completion request: an edit's chunk is taken around it. */
  private readonly cursorLine = new Map<string, number>();

  /** The path the model sees for a document, and the repository name. */
  describe(uri: string): { path: string; repoName?: string } {
    const file = uri.startsWith('file:') ? fileURLToPath(uri) : uri;
    const folder = this.folders.find((f) => uri.startsWith(f.uri.endsWith('/') ? f.uri : `${f.uri}/`));
    if (!folder) return { path: basename(file) };
    return { path: relative(fileURLToPath(folder.uri), file), repoName: folder.name };
  }

  /** Other files' chunks for a completion in `uri`. */
  contextFor(uri: string): Chunk[] {
    return this.recent.forCompletion(uri);
  }

  cursorAt(uri: string, line: number): void {
    this.cursorLine.set(uri, line);
  }

  opened(uri: string, text: string): void {
    this.recent.opened(uri, this.describe(uri).path, text);
  }

  edited(uri: string, text: string): void {
    this.recent.edited(uri, this.describe(uri).path, text, this.cursorLine.get(uri) ?? 0);
  }

  closed(uri: string): void {
    this.recent.closed(uri);
    this.cursorLine.delete(uri);
  }
}
