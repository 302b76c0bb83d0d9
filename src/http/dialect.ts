/**
 * Errors the turnstile itself produces, written in the dialect the client already parses:
 * Ollama's native API (`{"error":"…"}`), the OpenAI-compatible API under /v1
 * (`{"error":{"message","type","param","code"}}`), ComfyUI's (`{"error":{"type","message",…}}`),
 * AUTOMATIC1111's (`{"error","detail","body","errors"}`, strings) or SwarmUI's (`{"error_id","error"}`).
 */

export type Dialect = "ollama" | "openai" | "comfy" | "a1111" | "swarmui";

/** The image side's dialects: the one its driver speaks (ImageTenant.dialect), ComfyUI's by default. */
export type ImageDialect = "comfy" | "a1111" | "swarmui";

/**
 * The listeners; each answers in its upstream's dialect. `nested`: a second Ollama listener for
 * LLM calls made from inside ComfyUI workflows (LISTEN_OLLAMA_NESTED).
 */
export type Listener = "ollama" | "comfy" | "nested";

export function dialectFor(listener: Listener, path: string, image: ImageDialect = "comfy"): Dialect {
  if (listener === "comfy") return image;
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
    case "a1111":
      // modules/api/api.py's handle_exception: every field a string.
      return { error: e.type, detail: e.message, body: "", errors: e.message };
    case "swarmui":
      return { error_id: e.type, error: e.message };
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
