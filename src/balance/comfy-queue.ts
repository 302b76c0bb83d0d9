/**
 * ComfyUI's own queue counters, seen through the turnstile, include the image jobs the turnstile
 * holds for the GPU (SPEC "Several cards"): SwarmUI and queue-polling balancers read `GET /queue`
 * and `GET /prompt` to pick the least busy backend, and a job waiting at our lock (or for Ollama
 * to empty) is invisible to ComfyUI. They are added as pending entries in ComfyUI's own shape.
 * Only when there is something to add is an answer read and rewritten; otherwise it passes as is.
 */

/** GET routes whose answers carry ComfyUI's queue depth (every route is served under /api too). */
export const QUEUE_VIEW_PATHS: ReadonlySet<string> = new Set(["/queue", "/api/queue", "/prompt", "/api/prompt"]);

/**
 * The jobs the turnstile holds, as the queue answers show them (jobs/held-prompts.ts): each as the
 * pending item it will be, under its real prompt_id, numbered above `top` (the highest number in
 * the queue read).
 */
export interface HeldQueue {
  readonly size: number;
  items(top: number): string[];
  /** Learns what numbering needs before the first answer that shows held jobs. */
  prepare?(): Promise<void>;
}

/**
 * The held prompts and, after them, one placeholder per GPU lease waiting at the lock (a lease has
 * no prompt: it shows as `gpu-turnstile-lease-N` with an empty workflow), for the counters.
 */
export function withWaitingLeases(prompts: HeldQueue, leases: number): HeldQueue {
  if (leases <= 0) return prompts;
  return {
    size: prompts.size + leases,
    items(top) {
      const own = prompts.items(top);
      const after = own.length > 0 ? Number(/^\[(-?[\d.]+)/.exec(own[own.length - 1]!)![1]) : top;
      return [...own, ...Array.from({ length: leases }, (_, i) => JSON.stringify([after + 1 + i, `gpu-turnstile-lease-${i + 1}`, {}, { gpu_turnstile: "GPU lease waiting" }, []]))];
    },
    prepare: prompts.prepare && (() => prompts.prepare!()),
  };
}

/** A queue item is `[number, prompt_id, prompt, extra_data, outputs_to_execute, …]`. */
function itemNumber(item: unknown): number {
  return Array.isArray(item) && typeof item[0] === "number" ? item[0] : -1;
}

/**
 * ComfyUI's answer text with `held` jobs added: as pending items after everything ComfyUI has,
 * under their own prompt_ids and workflows (`/queue`), or to `exec_info.queue_remaining`
 * (`GET /prompt`). undefined when the text is not the JSON expected. The queue's items are spliced into the text, not re-serialized: a workflow's
 * 64-bit seeds would lose digits through a JavaScript number.
 */
export function addHeldJobs(text: string, held: HeldQueue): string | undefined {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) return undefined;
  const o = doc as Record<string, unknown>;
  if (Array.isArray(o.queue_pending) && Array.isArray(o.queue_running)) {
    // ComfyUI writes queue_pending last; the items go just before the array's closing bracket.
    const keys = Object.keys(o);
    const end = keys[keys.length - 1] === "queue_pending" ? /\]\s*\}\s*$/.exec(text) : null;
    if (!end) return undefined;
    let top = -1;
    for (const item of o.queue_running) top = Math.max(top, itemNumber(item));
    for (const item of o.queue_pending) top = Math.max(top, itemNumber(item));
    const added = held.items(top);
    return `${text.slice(0, end.index)}${o.queue_pending.length > 0 ? ", " : ""}${added.join(", ")}${text.slice(end.index)}`;
  }
  const info = o.exec_info;
  if (typeof info === "object" && info !== null && typeof (info as Record<string, unknown>).queue_remaining === "number") {
    const i = info as Record<string, unknown>;
    return JSON.stringify({ ...o, exec_info: { ...i, queue_remaining: (i.queue_remaining as number) + held.size } });
  }
  return undefined;
}

/**
 * ComfyUI's answer with `held` jobs added, or the answer unchanged: nothing held, not a 200, an
 * encoded body (ComfyUI's optional compression), or a body that is not the JSON expected.
 */
export async function withHeldJobs(res: Response, held: HeldQueue): Promise<Response> {
  if (held.size <= 0 || res.status !== 200 || res.body === null || res.headers.has("content-encoding")) return res;
  const [text] = await Promise.all([res.text(), held.prepare?.()]);
  const added = addHeldJobs(text, held);
  const headers = new Headers(res.headers);
  headers.delete("content-length");
  return new Response(added ?? text, { status: res.status, statusText: res.statusText, headers });
}
