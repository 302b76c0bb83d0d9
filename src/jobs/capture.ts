/**
 * Pass a response body to the client while keeping the first `limit` bytes for ourselves.
 *
 * The upstream body is read by our own loop, not by the client: when ComfyUI has answered 200
 * the job is queued whatever the client does next, so a client that hangs up must not stop us
 * from learning the prompt_id we need to track that job. Chunks for a vanished client are dropped.
 */
export interface Captured {
  /** The body for the client. */
  body: ReadableStream<Uint8Array>;
  /** The first `limit` bytes, once the upstream body has ended (or failed). */
  head: Promise<Uint8Array>;
}

export function captureHead(source: ReadableStream<Uint8Array>, limit: number): Captured {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  let clientGone = false;
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
    },
    cancel() {
      clientGone = true;
    },
  });

  const head = (async () => {
    const parts: Uint8Array[] = [];
    let kept = 0;
    const reader = source.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        if (kept < limit) {
          const take = value.subarray(0, limit - kept);
          parts.push(take.slice());
          kept += take.length;
        }
        if (!clientGone) controller.enqueue(value);
      }
      if (!clientGone) controller.close();
    } catch (err) {
      if (!clientGone) controller.error(err);
    }
    const out = new Uint8Array(kept);
    let at = 0;
    for (const p of parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  })();

  return { body, head };
}

/**
 * The prompt_id from a /prompt answer. A body cut at PROMPT_CAPTURE_LIMIT is not valid JSON,
 * but ComfyUI writes prompt_id first, so a textual match still finds it.
 */
export function findPromptId(head: Uint8Array): string | undefined {
  const text = new TextDecoder().decode(head);
  try {
    const v: unknown = JSON.parse(text);
    if (v && typeof v === "object" && "prompt_id" in v) {
      const id = (v as { prompt_id: unknown }).prompt_id;
      if (typeof id === "string" && id) return id;
      if (typeof id === "number") return String(id);
    }
    return undefined;
  } catch {
    const m = /"prompt_id"\s*:\s*"((?:[^"\\]|\\.)+)"/.exec(text);
    return m?.[1];
  }
}

/** The `number` ComfyUI gave the job in its /prompt answer (it writes it after prompt_id). */
export function findNumber(head: Uint8Array): number | undefined {
  const m = /"number"\s*:\s*(-?\d+(?:\.\d+)?)/.exec(new TextDecoder().decode(head));
  return m ? Number(m[1]) : undefined;
}
