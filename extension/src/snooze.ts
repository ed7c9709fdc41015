// Snooze: no completions while typing for a few minutes. VS Code's own snooze
// (editor.action.inlineSuggest.snooze, VS Code 1.10x+) hides every provider's
// suggestions; ours also stops asking the server and shows the time left in
// the status bar. Explicit requests (Alt+\) still complete.
import * as vscode from 'vscode';

export class Snooze implements vscode.Disposable {
  private until = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly changed: () => void) {}

  /** Minutes left, rounded up; undefined when not snoozed. */
  minutesLeft(now = Date.now()): number | undefined {
    return this.until > now ? Math.ceil((this.until - now) / 60_000) : undefined;
  }

  async start(minutes: number): Promise<void> {
    this.until = Date.now() + minutes * 60_000;
    // Older editors have no such command; ours works alone there.
    await Promise.resolve(vscode.commands.executeCommand('editor.action.inlineSuggest.snooze', minutes)).catch(() => undefined);
    this.tick();
  }

  async cancel(): Promise<void> {
    this.until = 0;
    await Promise.resolve(vscode.commands.executeCommand('editor.action.inlineSuggest.cancelSnooze')).catch(() => undefined);
    this.tick();
  }

  /** Re-renders every 15 s while snoozed, and once when it ends. */
  private tick(): void {
    clearTimeout(this.timer);
    this.changed();
    if (this.minutesLeft() !== undefined) this.timer = setTimeout(() => this.tick(), Math.min(15_000, Math.max(0, this.until - Date.now()) + 50));
  }

  dispose(): void {
    clearTimeout(this.timer);
  }
}
