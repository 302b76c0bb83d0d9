/**
 * Errors the turnstile itself produces, written in the dialect the client already parses:
 * Ollama's native API (`{"error":"…"}`), the OpenAI-compatible API under /v1
 * (`{"error":{"message","type","param","code"}}`), or ComfyUI's (`{"error":{"type","message",…}}`).
 */

export type Dialect = "ollama" | "openai" | "comfy";

/**
 * The listeners; each answers in its upstream's dialect. `nested`: a second Ollama listener for
 * LLM calls made from inside ComfyUI workflows (LISTEN_OLLAMA_NESTED).
 */
export type Listener = "ollama" | "comfy" | "nested";

export function dialectFor(listener: Listener, path: string): Dialect {
  if (listener === "comfy") return "comfy";
  return path === "/v1" || path.startsWith("/v1/") ? "openai" : "ollama";
}

export interface ErrorReply {
  status: number;
  message: string;
  /** OpenAI `type` / ComfyUI `type`; a short machine-readable reason. */
  type: string;
  headers?: Record<string, string>;
}

export function errorBody(dialect: Dialect, e: ErrorReply): unknown {
  switch (dialect) {
    case "ollama":
      return { error: e.message };
    case "openai":
      return { error: { message: e.message, type: e.type, param: null, code: null } };
    case "comfy":
      return { error: { type: e.type, message: e.message, details: "", extra_info: {} }, node_errors: {} };
  }
}

/** Answers made by errorResponse, with their body's size: nothing to watch while they are sent. */
const ownAnswers = new WeakMap<Response, number>();

export function errorResponse(dialect: Dialect, e: ErrorReply): Response {
  const body = Buffer.from(JSON.stringify(errorBody(dialect, e)));
  const res = new Response(body, {
    status: e.status,
    headers: { "content-type": "application/json; charset=utf-8", ...e.headers },
  });
  ownAnswers.set(res, body.length);
  return res;
}

/** The body size of an answer errorResponse made; undefined for any other response. */
export function ownAnswerSize(res: Response): number | undefined {
  return ownAnswers.get(res);
}
