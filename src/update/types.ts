import type { Logger } from "../observe/log.ts";

/** The four levels the updater writes; any project logger fits. */
export type UpdateLog = Pick<Logger, "debug" | "info" | "warn" | "error">;

/** `fetch` narrowed to what the updater calls, so tests can pass a plain function. */
export type FetchFn = (input: string | URL, init?: RequestInit) => Promise<Response>;

/** A failure the updater reports as-is: the message says exactly what was refused and why. */
export class UpdateRefused extends Error {
  override readonly name = "UpdateRefused";
  /** staging failed for lack of rights (Windows: not elevated), so an elevated retry may succeed */
  readonly needsElevation: boolean;
  constructor(message: string, opts: { needsElevation?: boolean; cause?: unknown } = {}) {
    super(message, { cause: opts.cause });
    this.needsElevation = opts.needsElevation ?? false;
  }
}
