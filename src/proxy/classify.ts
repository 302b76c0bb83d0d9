/**
 * Which requests touch the GPU. One table per listener; everything not listed passes
 * through without the lock. Kept in one place so the rules can be read (and tested) at a glance.
 */
export type Listener = "ollama" | "comfy";
/** "ws": websocket upgrades, which listener.ts relays before classification (they never lock). */
export type RequestClass = "llm" | "image" | "pass" | "ws";

/** POST routes of Ollama that run inference (load a model onto the GPU). */
const LLM_PATHS: ReadonlySet<string> = new Set([
  "/api/generate",
  "/api/chat",
  "/api/embed",
  "/api/embeddings",
  "/v1/chat/completions",
  "/v1/completions",
  "/v1/embeddings",
  "/v1/responses",
  "/v1/messages",
  "/v1/audio/transcriptions",
]);

/** POST routes of ComfyUI that enqueue a job. ComfyUI serves every route under `/api` too. */
const IMAGE_PATHS: ReadonlySet<string> = new Set(["/prompt", "/api/prompt"]);

/** A trailing slash is routed to the same handler by neither upstream, so we match exact paths only. */
export function classify(listener: Listener, method: string, path: string): RequestClass {
  if (method !== "POST") return "pass";
  if (listener === "ollama") return LLM_PATHS.has(path) ? "llm" : "pass";
  return IMAGE_PATHS.has(path) ? "image" : "pass";
}

export const CLASSIFICATION = { llm: [...LLM_PATHS], image: [...IMAGE_PATHS] } as const;
