/**
 * The simulated Ollama's OpenAI-compatible routes (middleware/openai.go): SSE chunks in the
 * v0.32.6+ style (role only in the first delta, a separate finish chunk, `created` pinned),
 * optional usage chunk, and OpenAI-shaped errors. Writers use json.Encoder, hence the trailing
 * newline and the charset-less content type, except where gin aborts early.
 */
import { goJson } from "./gojson.ts";
import type { AnswerStats } from "./ollama-core.ts";
import type { Ctx } from "./ollama-native.ts";
import { countTokens, embedText, type Model, supports } from "./ollama-models.ts";
import type { Lease } from "./ollama-scheduler.ts";
import { bindJson, JSON_CT, str, streamRes } from "./ollama-wire.ts";

function errorType(status: number): string {
  return status === 400 ? "invalid_request_error" : status === 404 ? "not_found_error" : "api_error";
}

function errorBody(status: number, message: string): unknown {
  return { error: { message, type: errorType(status), param: null, code: null } };
}

/** Errors raised by the middleware itself (gin AbortWithStatusJSON). */
function abortRes(status: number, message: string): Response {
  return new Response(goJson(errorBody(status, message)), { status, headers: { "Content-Type": JSON_CT } });
}

/** Errors from the wrapped native handler, rewritten by BaseWriter.writeError. */
function writerError(status: number, message: string): Response {
  return encoderRes(status, errorBody(status, message));
}

function encoderRes(status: number, body: unknown): Response {
  return new Response(goJson(body) + "\n", { status, headers: { "Content-Type": "application/json" } });
}

const SSE = "text/event-stream";

function sse(data: unknown): string {
  return `data: ${goJson(data)}\n\n`;
}

function usage(s: AnswerStats): Record<string, number> {
  return { prompt_tokens: s.promptEvalCount, completion_tokens: s.evalCount, total_tokens: s.promptEvalCount + s.evalCount };
}

function randomId(prefix: string): string {
  return `${prefix}-${Math.floor(Math.random() * 999)}`;
}

function includeUsage(req: Record<string, unknown>): boolean {
  const o = req.stream_options;
  return !!o && typeof o === "object" && (o as Record<string, unknown>).include_usage === true;
}

type Kind = "chat" | "completion";

/** POST /v1/chat/completions and /v1/completions. */
export async function completions(ctx: Ctx, kind: Kind): Promise<Response> {
  const b = bindJson(ctx.body, kind === "chat" ? "openai.ChatCompletionRequest" : "openai.CompletionRequest");
  if (!b.ok) return abortRes(400, b.error);
  const req = b.value;
  let prompt: string;
  if (kind === "chat") {
    const messages = Array.isArray(req.messages) ? (req.messages as unknown[]) : [];
    if (messages.length === 0) return abortRes(400, "[] is too short - 'messages'");
    prompt = messages.map((m) => (m && typeof m === "object" ? str((m as Record<string, unknown>).content) : "")).join("\n");
  } else {
    prompt = str(req.prompt);
  }
  const name = str(req.model);
  const model = ctx.core.find(name);
  if (!model) return writerError(404, `model '${name}' not found`);
  if (!supports(model, "completion")) {
    return writerError(400, `${JSON.stringify(name)} does not support ${kind === "chat" ? "chat" : "generate"}`);
  }

  const startedAt = ctx.core.gpu.now();
  let lease: Lease;
  try {
    lease = await ctx.core.lease(model, undefined, ctx.req);
  } catch {
    return writerError(499, "request canceled");
  }
  const id = randomId(kind === "chat" ? "chatcmpl" : "cmpl");
  const created = Math.floor(startedAt / 1000);
  const maxTokens = typeof req.max_tokens === "number" ? req.max_tokens : undefined;
  const object = kind === "chat" ? "chat.completion" : "text_completion";

  if (req.stream !== true) {
    try {
      const s = await ctx.core.answer(prompt, maxTokens, lease, startedAt, ctx.req.signal, () => {});
      const choice =
        kind === "chat"
          ? { index: 0, message: { role: "assistant", content: s.text }, finish_reason: s.doneReason }
          : { text: s.text, index: 0, finish_reason: s.doneReason };
      return encoderRes(200, { id, object, created, model: name, system_fingerprint: "fp_ollama", choices: [choice], usage: usage(s) });
    } catch {
      return writerError(499, "request canceled");
    } finally {
      lease.release();
    }
  }

  const withUsage = includeUsage(req);
  return streamRes(SSE, ctx.req.signal, async (write, signal) => {
    try {
      if (kind === "chat") {
        const chunk = (choices: unknown[], extra: Record<string, unknown> = {}): unknown => ({
          id,
          object: "chat.completion.chunk",
          created,
          model: name,
          system_fingerprint: "fp_ollama",
          choices,
          ...extra,
        });
        let first = true;
        const s = await ctx.core.answer(prompt, maxTokens, lease, startedAt, signal, (tok) => {
          const delta = first ? { role: "assistant", content: tok } : { content: tok };
          first = false;
          write(sse(chunk([{ index: 0, delta, finish_reason: null }])));
        });
        write(sse(chunk([{ index: 0, delta: {}, finish_reason: s.doneReason }])));
        if (withUsage) write(sse(chunk([], { usage: usage(s) })));
      } else {
        // CompletionChunk puts choices before model; with include_usage every chunk carries zeros.
        const chunk = (choices: unknown[], u?: Record<string, number>): unknown => {
          const c: Record<string, unknown> = { id, object: "text_completion", created, choices, model: name, system_fingerprint: "fp_ollama" };
          if (withUsage) c.usage = u ?? { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
          return c;
        };
        const s = await ctx.core.answer(prompt, maxTokens, lease, startedAt, signal, (tok) => {
          write(sse(chunk([{ text: tok, index: 0, finish_reason: null }])));
        });
        write(sse(chunk([{ text: "", index: 0, finish_reason: s.doneReason }])));
        if (withUsage) write(sse(chunk([], usage(s))));
      }
      write("data: [DONE]\n\n");
    } catch {
      // client went away or the server stopped
    } finally {
      lease.release();
    }
  });
}

/** POST /v1/embeddings. */
export async function embeddings(ctx: Ctx): Promise<Response> {
  const b = bindJson(ctx.body, "openai.EmbedRequest");
  if (!b.ok) return abortRes(400, b.error);
  const req = b.value;
  const format = str(req.encoding_format);
  if (format !== "" && !["float", "base64"].includes(format.toLowerCase())) {
    return abortRes(400, `Invalid value for 'encoding_format' = ${format}. Supported values: ['float', 'base64'].`);
  }
  let input: unknown = req.input;
  if (input === "") input = [""];
  if (input === undefined || input === null || (Array.isArray(input) && input.length === 0)) return abortRes(400, "invalid input");
  const texts = typeof input === "string" ? [input] : Array.isArray(input) && input.every((x) => typeof x === "string") ? (input as string[]) : undefined;
  if (!texts) return writerError(400, "invalid input type");
  const name = str(req.model);
  const h = await held(ctx, name, `model ${JSON.stringify(name)} not found, try pulling it first`);
  if (h instanceof Response) return h;
  const { model, lease } = h;
  try {
    await ctx.core.timers.sleep(ctx.core.timing.tokenDelayMs, ctx.req.signal);
    const dims = typeof req.dimensions === "number" && req.dimensions > 0 ? Math.min(req.dimensions, model.embeddingLength) : model.embeddingLength;
    const tokens = texts.reduce((n, t) => n + countTokens(t), 0);
    const data = texts.map((t, index) => {
      const e = embedText(t, dims);
      return { object: "embedding", embedding: format.toLowerCase() === "base64" ? floatsToBase64(e) : e, index };
    });
    return encoderRes(200, { object: "list", data, model: name, usage: { prompt_tokens: tokens, total_tokens: tokens } });
  } catch {
    return writerError(499, "request canceled");
  } finally {
    lease.release();
  }
}

function floatsToBase64(v: number[]): string {
  const buf = Buffer.alloc(v.length * 4);
  v.forEach((x, i) => buf.writeFloatLE(x, i * 4));
  return buf.toString("base64");
}

/** GET /v1/models. */
export function models(ctx: Ctx): Response {
  const data = [...ctx.core.models]
    .sort((a, b) => b.modifiedAt - a.modifiedAt)
    .map((m) => ({ id: m.name, object: "model", created: Math.floor(m.modifiedAt / 1000), owned_by: "library" }));
  return encoderRes(200, { object: "list", data });
}

/** GET /v1/models/:model. */
export function model(ctx: Ctx, name: string): Response {
  const m = ctx.core.find(name);
  if (!m) return writerError(404, `model '${name}' not found`);
  return encoderRes(200, { id: name, object: "model", created: Math.floor(m.modifiedAt / 1000), owned_by: "library" });
}

/**
 * POST /v1/responses (ResponsesMiddleware → ChatHandler), answered whole: the simulator does not
 * stream it. `input` is a string or a list of messages whose text is the prompt.
 */
export async function responses(ctx: Ctx): Promise<Response> {
  const b = bindJson(ctx.body, "openai.ResponsesRequest");
  if (!b.ok) return abortRes(400, b.error);
  const req = b.value;
  const input = req.input;
  const prompt =
    typeof input === "string"
      ? input
      : Array.isArray(input)
        ? input.map((m) => (m && typeof m === "object" ? str((m as Record<string, unknown>).content) : "")).join("\n")
        : "";
  const name = str(req.model);
  const startedAt = ctx.core.gpu.now();
  const h = await held(ctx, name, `model '${name}' not found`);
  if (h instanceof Response) return h;
  const { lease } = h;
  try {
    const s = await ctx.core.answer(prompt, undefined, lease, startedAt, ctx.req.signal, () => {});
    const content = [{ type: "output_text", text: s.text, annotations: [] }];
    return encoderRes(200, {
      id: randomId("resp"),
      object: "response",
      created_at: Math.floor(startedAt / 1000),
      status: "completed",
      model: name,
      output: [{ type: "message", id: randomId("msg"), status: "completed", role: "assistant", content }],
      usage: { input_tokens: s.promptEvalCount, output_tokens: s.evalCount, total_tokens: s.promptEvalCount + s.evalCount },
    });
  } catch {
    return writerError(499, "request canceled");
  } finally {
    lease.release();
  }
}

/** The model found and held (loaded if need be) for one request, or the error reply. */
async function held(ctx: Ctx, name: string, notFound: string): Promise<{ model: Model; lease: Lease } | Response> {
  const model = ctx.core.find(name);
  if (!model) return writerError(404, notFound);
  try {
    return { model, lease: await ctx.core.lease(model, undefined, ctx.req) };
  } catch {
    return writerError(499, "request canceled");
  }
}
