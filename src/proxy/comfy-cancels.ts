/**
 * A client ending its own ComfyUI jobs, seen as the request passes (issue 19, api-facts S3): when
 * ComfyUI has answered, the followers of the jobs it names look again at once (jobs/nudge.ts)
 * instead of at their next poll. The routes, each also under `/api/` (the jobs routes only there):
 *
 * - `POST /interrupt` with `{"prompt_id"}`: that job; without one: whatever runs.
 * - `POST /queue {"delete":[ids]}`: those jobs; `{"clear":true}`: every pending one.
 * - `POST /api/jobs/{id}/cancel`: that job; `POST /api/jobs/cancel {"job_ids":[...]}`: those.
 *
 * A body the turnstile did not buffer (chunked, or above RETRY_BODY_LIMIT) names every job.
 * A delete or clear also removes the prompts the turnstile holds for the GPU (heldTargets).
 */
import type { NudgeTarget } from "../jobs/nudge.ts";

/** What one passing request may end; undefined when it ends nothing. */
export interface PassWatch {
  /** The buffered request body, if any. */
  body(bytes: Uint8Array): void;
  /** ComfyUI answered with this status. */
  answered(status: number): void;
  /** The answer's body ended (or its client went away). */
  ended?(): void;
}

const JOB_CANCEL = /^\/api\/jobs\/([^/]+)\/cancel$/;

/** The route without ComfyUI's `/api` alias (the jobs routes keep theirs: they have no other). */
function unaliased(path: string): string {
  return path.startsWith("/api/") && !path.startsWith("/api/jobs") ? path.slice(4) : path;
}

/** Whether a POST to this routed path can end jobs. */
export function isCancelRoute(path: string): boolean {
  const p = unaliased(path);
  return p === "/interrupt" || p === "/queue" || p === "/api/jobs/cancel" || JOB_CANCEL.test(p);
}

/** The jobs a cancel-like request names, from its routed path and body (pure). */
export function cancelTargets(path: string, body: Uint8Array | undefined): NudgeTarget | undefined {
  const p = unaliased(path);
  const one = JOB_CANCEL.exec(p);
  if (one) return [one[1]!];
  if (!isCancelRoute(p)) return undefined;
  const data = parse(body);
  if (p === "/interrupt") return typeof data?.prompt_id === "string" && data.prompt_id !== "" ? [data.prompt_id] : "all";
  if (p === "/api/jobs/cancel") return strings(data?.job_ids) ?? "all";
  if (data === undefined) return "all";
  if (data.clear) return "all";
  return strings(data.delete);
}

function parse(body: Uint8Array | undefined): Record<string, unknown> | undefined {
  if (!body) return undefined;
  try {
    const v: unknown = JSON.parse(new TextDecoder().decode(body));
    return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

function strings(v: unknown): string[] | undefined {
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : undefined;
}

/**
 * The prompts a queue edit removes from the pending queue as a client sees it, which includes the
 * prompts the turnstile holds for the GPU (jobs/held-prompts.ts): a delete's ids, every one for a
 * clear, a jobs-API cancel's ids. Not an interrupt (it stops only what runs), and only from a body
 * that was read: one not seen removes nothing held.
 */
export function heldTargets(path: string, body: Uint8Array): NudgeTarget | undefined {
  const p = unaliased(path);
  if (p === "/interrupt") return undefined;
  const target = cancelTargets(path, body);
  if (target !== "all") return target;
  return p === "/queue" && parse(body)?.clear ? "all" : undefined;
}

/**
 * The watch for one request on the ComfyUI listener: nudges on a 2xx answer to a cancel route.
 * `drop` removes the held prompts it names as soon as its body is read, before ComfyUI sees the
 * edit: a held prompt must not be sent after a client deleted it.
 */
export function comfyCancelWatch(nudge: (target: NudgeTarget) => void, drop?: (target: NudgeTarget) => void): (method: string, path: string) => PassWatch | undefined {
  return (method, path) => {
    if (method !== "POST" || !isCancelRoute(path)) return undefined;
    let body: Uint8Array | undefined;
    return {
      body: (b) => {
        body = b;
        const held = drop && heldTargets(path, b);
        if (held) drop(held);
      },
      answered(status) {
        if (status < 200 || status >= 300) return;
        const target = cancelTargets(path, body);
        if (target !== undefined && (target === "all" || target.length > 0)) nudge(target);
      },
    };
  };
}
