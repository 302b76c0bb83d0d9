/**
 * The simulated Ollama's native API (/api/*), following server/routes.go: the unload shortcut
 * runs before capability checks, empty prompts load, inference streams NDJSON by default.
 */
import { formatGoTime } from "./clock.ts";
import { type AnswerStats, metrics, type OllamaCore } from "./ollama-core.ts";
import { contextIds, countTokens, embedText, type Model, supports } from "./ollama-models.ts";
import type { Lease } from "./ollama-scheduler.ts";
import { bindJson, jsonRes, parseKeepAlive, str, streamRes } from "./ollama-wire.ts";
import { goJson } from "./gojson.ts";
import { remoteFields } from "./ollama-cloud.ts";

export interface Ctx {
  req: Request;
  url: URL;
  body: Uint8Array<ArrayBuffer>;
  core: OllamaCore;
}

const NDJSON = "application/x-ndjson";

function details(m: Model, withLengths: boolean): Record<string, unknown> {
  const d: Record<string, unknown> = {
    parent_model: "",
    format: "gguf",
    family: m.family,
    families: [m.family],
    parameter_size: m.parameterSize,
    quantization_level: m.quantization,
  };
  if (withLengths) {
    d.context_length = m.contextLength;
    d.embedding_length = m.embeddingLength;
  }
  return d;
}

export function tags(ctx: Ctx): Response {
  const models = [...ctx.core.models]
    .sort((a, b) => b.modifiedAt - a.modifiedAt)
    .map((m) => ({
      name: m.name,
      model: m.name,
      ...remoteFields(m),
      modified_at: formatGoTime(m.modifiedAt, false),
      size: m.size,
      digest: m.digest,
      details: details(m, true),
      capabilities: m.capabilities,
    }));
  return jsonRes(200, { models });
}

export function ps(ctx: Ctx): Response {
  const models = ctx.core.sched
    .list()
    .sort((a, b) => b.expiresAt - a.expiresAt)
    .map((r) => ({
      name: r.model.name,
      model: r.model.name,
      size: r.model.vramBytes,
      digest: r.model.digest,
      details: details(r.model, false),
      expires_at: formatGoTime(r.expiresAt, false),
      size_vram: r.sizeVram,
      context_length: r.model.runnerContext,
    }));
  return jsonRes(200, { models });
}

/** Binds the body the way every inference handler does; returns an error response or the fields. */
function bind(ctx: Ctx, goType: string): Record<string, unknown> | Response {
  const b = bindJson(ctx.body, goType);
  if (!b.ok) return jsonRes(b.status, { error: b.error === "EOF" ? "missing request body" : b.error });
  return b.value;
}

function numPredict(req: Record<string, unknown>): number | undefined {
  const o = req.options;
  if (o && typeof o === "object" && typeof (o as Record<string, unknown>).num_predict === "number") {
    return (o as Record<string, number>).num_predict;
  }
  return undefined;
}

type Shape = "generate" | "chat";

/** The body of every generate/chat reply: `response` or `message` in the right place. */
function reply(shape: Shape, model: string, createdAt: string, content: string, done: boolean): Record<string, unknown> {
  return shape === "generate"
    ? { model, created_at: createdAt, response: content, done }
    : { model, created_at: createdAt, message: { role: "assistant", content }, done };
}

function finalChunk(shape: Shape, ctx: Ctx, model: string, content: string, s: AnswerStats, prompt: string, raw: boolean): Record<string, unknown> {
  const out = reply(shape, model, ctx.core.createdAt(), content, true);
  out.done_reason = s.doneReason;
  if (shape === "generate" && !raw) out.context = contextIds(prompt, s.evalCount, s.promptEvalCount);
  return { ...out, ...metrics(s) };
}

/** POST /api/generate and /api/chat. */
export async function inference(ctx: Ctx, shape: Shape): Promise<Response> {
  const req = bind(ctx, shape === "generate" ? "api.GenerateRequest" : "api.ChatRequest");
  if (req instanceof Response) return req;
  const name = str(req.model);
  const ka = parseKeepAlive(req.keep_alive);
  if (!ka.ok) return jsonRes(400, { error: ka.error });
  const model = ctx.core.find(name);
  if (!model) return jsonRes(404, { error: `model '${name}' not found` });

  const messages = Array.isArray(req.messages) ? (req.messages as unknown[]) : [];
  const prompt =
    shape === "generate"
      ? str(req.prompt)
      : messages.map((m) => (m && typeof m === "object" ? str((m as Record<string, unknown>).content) : "")).join("\n");
  const empty = shape === "generate" ? prompt === "" : messages.length === 0;

  // The unload shortcut comes before any capability check (since v0.3.11), so it works for
  // embedding-only models too, and is a no-op reply for a model that is not loaded.
  const refused = !supports(model, "completion");
  if (refused && ctx.core.timing.legacyUnload) {
    return jsonRes(400, { error: `${JSON.stringify(name)} does not support ${shape}` });
  }
  if (empty && ka.ms === 0) {
    ctx.core.sched.expire(model);
    return jsonRes(200, { ...reply(shape, name, ctx.core.createdAt(), "", true), done_reason: "unload" });
  }
  if (refused) return jsonRes(400, { error: `${JSON.stringify(name)} does not support ${shape}` });

  const startedAt = ctx.core.gpu.now();
  let lease: Lease;
  try {
    lease = await ctx.core.lease(model, ka.ms, ctx.req);
  } catch {
    return jsonRes(499, { error: "request canceled" });
  }
  if (empty) {
    lease.release();
    return jsonRes(200, { ...reply(shape, name, ctx.core.createdAt(), "", true), done_reason: "load" });
  }

  const raw = req.raw === true;
  const limit = numPredict(req);
  if (req.stream === false) {
    try {
      const s = await ctx.core.answer(prompt, limit, lease, startedAt, ctx.req.signal, () => {});
      return jsonRes(200, finalChunk(shape, ctx, name, s.text, s, prompt, raw));
    } catch {
      return jsonRes(499, { error: "request canceled" });
    } finally {
      lease.release();
    }
  }
  return streamRes(NDJSON, ctx.req.signal, async (write, signal) => {
    try {
      const s = await ctx.core.answer(prompt, limit, lease, startedAt, signal, (tok) => {
        write(goJson(reply(shape, name, ctx.core.createdAt(), tok, false)) + "\n");
      });
      write(goJson(finalChunk(shape, ctx, name, "", s, prompt, raw)) + "\n");
    } catch {
      // client went away or the server stopped: nothing more to write
    } finally {
      lease.release();
    }
  });
}

/** POST /api/embed: always schedules the model (no unload shortcut); keep_alive 0 unloads after. */
export async function embed(ctx: Ctx): Promise<Response> {
  const req = bind(ctx, "api.EmbedRequest");
  if (req instanceof Response) return req;
  let input: string[] = [];
  if (typeof req.input === "string") {
    if (req.input !== "") input = [req.input];
  } else if (Array.isArray(req.input)) {
    if (!req.input.every((x) => typeof x === "string")) return jsonRes(400, { error: "invalid input type" });
    input = req.input as string[];
  } else if (req.input !== undefined && req.input !== null) {
    return jsonRes(400, { error: "invalid input type" });
  }
  const startedAt = ctx.core.gpu.now();
  const held = await embeddingModel(ctx, req);
  if (held instanceof Response) return held;
  const { name, model, lease } = held;
  try {
    if (input.length === 0) return jsonRes(200, { model: name, embeddings: [] });
    await ctx.core.timers.sleep(ctx.core.timing.tokenDelayMs, ctx.req.signal);
    const dims = typeof req.dimensions === "number" && req.dimensions > 0 ? Math.min(req.dimensions, model.embeddingLength) : model.embeddingLength;
    const embeddings = input.map((t) => embedText(t, dims));
    const ns = (ms: number): number => Math.max(1, Math.round(ms * 1e6));
    return jsonRes(200, {
      model: name,
      embeddings,
      total_duration: ns(ctx.core.gpu.now() - startedAt),
      load_duration: ns(lease.waitedMs),
      prompt_eval_count: input.reduce((n, t) => n + countTokens(t), 0),
    });
  } catch {
    return jsonRes(499, { error: "request canceled" });
  } finally {
    lease.release();
  }
}

/**
 * What /api/embed and /api/embeddings share (EmbedHandler and EmbeddingsHandler): keep_alive
 * parsed, the model found, and the model loaded and held for this request — or the error reply.
 */
async function embeddingModel(
  ctx: Ctx,
  req: { keep_alive?: unknown; model?: unknown },
): Promise<{ name: string; model: NonNullable<ReturnType<Ctx["core"]["find"]>>; lease: Lease } | Response> {
  const ka = parseKeepAlive(req.keep_alive);
  if (!ka.ok) return jsonRes(400, { error: ka.error });
  const name = str(req.model);
  const model = ctx.core.find(name);
  if (!model) return jsonRes(404, { error: `model ${JSON.stringify(name)} not found, try pulling it first` });
  try {
    return { name, model, lease: await ctx.core.lease(model, ka.ms, ctx.req) };
  } catch {
    return jsonRes(499, { error: "request canceled" });
  }
}

/** POST /api/embeddings (legacy): one prompt, `{"embedding":[...]}`. */
export async function embeddings(ctx: Ctx): Promise<Response> {
  const req = bind(ctx, "api.EmbeddingRequest");
  if (req instanceof Response) return req;
  const held = await embeddingModel(ctx, req);
  if (held instanceof Response) return held;
  const { model, lease } = held;
  try {
    const prompt = str(req.prompt);
    if (prompt === "") return jsonRes(200, { embedding: [] });
    await ctx.core.timers.sleep(ctx.core.timing.tokenDelayMs, ctx.req.signal);
    return jsonRes(200, { embedding: embedText(prompt, model.embeddingLength) });
  } catch {
    return jsonRes(499, { error: "request canceled" });
  } finally {
    lease.release();
  }
}

export function show(ctx: Ctx): Response {
  const req = bind(ctx, "api.ShowRequest");
  if (req instanceof Response) return req;
  const name = str(req.model) || str(req.name);
  if (name === "") return jsonRes(400, { error: "model is required" });
  const m = ctx.core.find(name);
  if (!m) return jsonRes(404, { error: `model '${name}' not found` });
  const arch = m.family.replace(/-/g, "_");
  return jsonRes(200, {
    license: "",
    modelfile: `# Modelfile generated by "ollama show"\nFROM ${m.name}\n`,
    parameters: 'stop                           "<|eot_id|>"',
    template: "{{ .Prompt }}",
    details: details(m, false),
    model_info: {
      "general.architecture": arch,
      "general.parameter_count": 0,
      [`${arch}.context_length`]: m.contextLength,
      [`${arch}.embedding_length`]: m.embeddingLength,
    },
    capabilities: m.capabilities,
    ...remoteFields(m),
    modified_at: formatGoTime(m.modifiedAt, false),
  });
}

/** POST /api/copy (`ollama cp`): 200 with no body, 404 for a source it does not have. */
export function copy(ctx: Ctx): Response {
  const req = bind(ctx, "api.CopyRequest");
  if (req instanceof Response) return req;
  const source = str(req.source);
  const destination = str(req.destination);
  if (source === "" || destination === "") return jsonRes(400, { error: "source and destination are required" });
  if (!ctx.core.copy(source, destination)) return jsonRes(404, { error: `model '${source}' not found` });
  return new Response(null, { status: 200 });
}

/** DELETE /api/delete (`ollama rm`). */
export function remove(ctx: Ctx): Response {
  const req = bind(ctx, "api.DeleteRequest");
  if (req instanceof Response) return req;
  const name = str(req.model) || str(req.name);
  if (name === "") return jsonRes(400, { error: "model is required" });
  if (!ctx.core.remove(name)) return jsonRes(404, { error: `model '${name}' not found` });
  return new Response(null, { status: 200 });
}

/** POST /api/pull: NDJSON progress as in O8 (already-present models re-verify their layers). */
export function pull(ctx: Ctx): Response {
  const req = bind(ctx, "api.PullRequest");
  if (req instanceof Response) return req;
  const name = str(req.model) || str(req.name);
  const m = ctx.core.find(name);
  const lines: Record<string, unknown>[] = [{ status: "pulling manifest" }];
  if (!m) {
    const error = "pull model manifest: file does not exist";
    if (req.stream === false) return jsonRes(500, { error });
    lines.push({ error });
  } else {
    const big = `sha256:${m.digest}`;
    for (const done of [0, 1_048_576, Math.floor(m.size / 8), Math.floor(m.size / 2), m.size]) {
      const line: Record<string, unknown> = { status: `pulling ${m.digest.slice(0, 12)}`, digest: big, total: m.size };
      if (done > 0) line.completed = done;
      lines.push(line);
    }
    for (const [i, size] of [1429, 7711, 6016, 96, 561].entries()) {
      const d = m.digest.slice(i + 1) + m.digest.slice(0, i + 1);
      lines.push({ status: `pulling ${d.slice(0, 12)}`, digest: `sha256:${d}`, total: size, completed: size });
    }
    lines.push({ status: "verifying sha256 digest" }, { status: "writing manifest" }, { status: "success" });
    if (req.stream === false) return jsonRes(200, { status: "success" });
  }
  return streamRes(NDJSON, ctx.req.signal, async (write, signal) => {
    try {
      for (const [i, line] of lines.entries()) {
        if (i > 0) await ctx.core.timers.sleep(ctx.core.timing.tokenDelayMs, signal);
        write(goJson(line) + "\n");
      }
    } catch {
      // client gone
    }
  });
}
