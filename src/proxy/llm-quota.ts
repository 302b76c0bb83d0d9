/**
 * A quota of concurrent LLM requests per client (issue 30): a request past it is refused on
 * arrival with 429, before anything is held or sent; one let in counts until its entry in the
 * status ends (answered, refused, cut or gone — every way proxyLLM ends a request ends it).
 */
import type { ErrorReply } from "../http/dialect.ts";
import type { LlmTracker } from "./app.ts";

export interface LlmQuota {
  /** A slot, or the refusal (no dialect: the listener puts it in the client's). */
  take(req: Request, clientIp: string | undefined): { release(): void } | { refused: Omit<ErrorReply, "status"> };
}

/** `inner` (or nothing), with `release` called once when the request's entry ends. */
export function releasingTracker<T>(inner: LlmTracker<T> | undefined, release: () => void): LlmTracker<T | undefined> {
  let done = false;
  const once = () => {
    if (done) return;
    done = true;
    release();
  };
  return {
    start: (path, clientIp) => inner?.start(path, clientIp),
    admitted: (t) => inner?.admitted(t as T),
    named: (t, model) => inner?.named(t as T, model),
    nested: (t) => inner?.nested(t as T),
    retrying: (t) => inner?.retrying?.(t as T),
    end: (t) => {
      inner?.end(t as T);
      once();
    },
  };
}
