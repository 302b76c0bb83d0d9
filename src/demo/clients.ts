/**
 * The demo's clients: what Open WebUI, LiteLLM, n8n or a RAG indexer would send, with the
 * numbers the summary needs (time to the first token is where waiting for the GPU shows).
 */
export interface ChatResult {
  ok: boolean;
  status: number;
  firstTokenMs?: number;
  totalMs: number;
  tokens: number;
  aborted?: boolean;
  error?: string;
}

/** A streaming chat on Ollama's native API (NDJSON) or the OpenAI-compatible one (SSE). */
export async function streamChat(
  base: string,
  opts: { model: string; prompt: string; api: "ollama" | "openai"; signal?: AbortSignal },
): Promise<ChatResult> {
  const t0 = performance.now();
  const path = opts.api === "ollama" ? "/api/chat" : "/v1/chat/completions";
  const body = { model: opts.model, messages: [{ role: "user", content: opts.prompt }], stream: true };
  try {
    const res = await fetch(base + path, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: opts.signal,
    });
    if (!res.ok || !res.body) {
      return { ok: false, status: res.status, totalMs: performance.now() - t0, tokens: 0, error: (await res.text()).slice(0, 200) };
    }
    let firstTokenMs: number | undefined;
    let tokens = 0;
    let buf = "";
    const dec = new TextDecoder();
    for await (const chunk of res.body) {
      buf += dec.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (!line || line === "data: [DONE]") continue;
        const json = line.startsWith("data: ") ? line.slice(6) : line;
        const o = JSON.parse(json) as { message?: { content?: string }; choices?: { delta?: { content?: string } }[] };
        const piece = o.message?.content ?? o.choices?.[0]?.delta?.content ?? "";
        if (piece) {
          tokens++;
          firstTokenMs ??= performance.now() - t0;
        }
      }
    }
    return { ok: true, status: res.status, firstTokenMs, totalMs: performance.now() - t0, tokens };
  } catch (err) {
    const aborted = opts.signal?.aborted ?? false;
    return { ok: false, status: 0, totalMs: performance.now() - t0, tokens: 0, aborted, error: err instanceof Error ? err.message : String(err) };
  }
}

export async function embed(base: string, model: string, input: string[]): Promise<{ ok: boolean; ms: number; status: number }> {
  const t0 = performance.now();
  const res = await fetch(base + "/api/embed", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model, input }),
  });
  await res.arrayBuffer();
  return { ok: res.ok, ms: performance.now() - t0, status: res.status };
}

export interface ImageResult {
  ok: boolean;
  status: number;
  promptId?: string;
  acceptedMs: number;
  doneMs?: number;
  error?: string;
}

/** Queue a workflow, then poll /history like a script would, until the image exists. */
export async function generateImage(base: string, workflow: unknown, onAccepted: (id: string, ms: number) => void): Promise<ImageResult> {
  const t0 = performance.now();
  const res = await fetch(base + "/prompt", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(workflow),
  });
  const text = await res.text();
  const acceptedMs = performance.now() - t0;
  if (res.status !== 200) return { ok: false, status: res.status, acceptedMs, error: text.slice(0, 200) };
  const promptId = (JSON.parse(text) as { prompt_id: string }).prompt_id;
  onAccepted(promptId, acceptedMs);
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    const h = (await (await fetch(`${base}/history/${promptId}`)).json()) as Record<string, { status?: { completed?: boolean; status_str?: string } }>;
    const st = h[promptId]?.status;
    if (st?.completed || st?.status_str === "error") {
      return { ok: st.completed === true, status: 200, promptId, acceptedMs, doneMs: performance.now() - t0 };
    }
    await Bun.sleep(100);
  }
  return { ok: false, status: 200, promptId, acceptedMs, error: "image not finished within 60 s" };
}
