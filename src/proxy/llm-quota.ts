/**
 * Quotas of LLM requests per client (issue 30), concurrent ones and GPU seconds: a request past
 * one is refused on arrival with 429, before anything is held or sent; one let in counts until its
 * entry in the status ends (answered, refused, cut or gone — every way proxyLLM ends a request
 * ends it), and its GPU time from each grant of a slot (`granted`) to that end.
 */
import type { ErrorReply } from "../http/dialect.ts";
import type { LlmTracker } from "./app.ts";

export interface LlmQuotaSlot {
  release(): void;
  /** The request holds a GPU slot now (each try). */
  granted?(): void;
  /** It gave the GPU slot back for a retry's backoff. */
  paused?(): void;
}

export interface LlmQuota {
  /** A slot, or the refusal (no dialect: the listener puts it in the client's). */
  take(req: Request, clientIp: string | undefined): LlmQuotaSlot | { refused: Omit<ErrorReply, "status"> };
}

/** `inner` (or nothing), telling `slot` of each grant and pause, and releasing it once when the request's entry ends. */
export function releasingTracker<T>(inner: LlmTracker<T> | undefined, slot: LlmQuotaSlot): LlmTracker<T | undefined> {
  let done = false;
  const once = () => {
    if (done) return;
    done = true;
    slot.release();
  };
  return {
    start: (path, clientIp) => inner?.start(path, clientIp),
    admitted: (t) => {
      inner?.admitted(t as T);
      if (!done) slot.granted?.();
    },
    named: (t, model) => inner?.named(t as T, model),
    nested: (t) => inner?.nested(t as T),
    retrying: (t) => {
      inner?.retrying?.(t as T);
      slot.paused?.();
    },
    end: (t) => {
      inner?.end(t as T);
      once();
    },
  };
}
