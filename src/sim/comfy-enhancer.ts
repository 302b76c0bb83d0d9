/**
 * A prompt-enhancer node for the simulated ComfyUI, after stavsap/comfyui-ollama's OllamaGenerate:
 * in the middle of a job it asks Ollama to rewrite a prompt (api-facts S4). Its `url` input is the
 * node's URL field; left empty, the simulator's `ollamaUrl` is used (OLLAMA_HOST, as the ollama Python client reads it).
 * Pointed at the turnstile's nested listener it is served during the job; pointed at the ordinary
 * one it waits for the job that is waiting for it, until its own timeout.
 */

export const ENHANCER_CLASS = "OllamaGenerate";

export const ENHANCER_NODE = {
  display: "Ollama Generate",
  category: "Ollama",
  inputs: { prompt: "STRING", model: "STRING", url: "STRING", keep_alive: "INT" } as Record<string, "STRING" | "INT">,
  outputs: ["STRING"],
};

export interface EnhancerCall {
  prompt: string;
  model: string;
  /** The node's URL field; "" = the simulator's default. */
  url: string;
  /** Minutes, as the node's keep_alive widget; absent = Ollama's default. */
  keepAliveMin?: number;
}

/**
 * POST /api/generate with `stream:false` and return the text, as the node does. Throws with the
 * message ComfyUI would show in execution_error when Ollama cannot be reached or refuses.
 */
export async function runEnhancer(call: EnhancerCall, fallbackUrl: string | undefined, signal: AbortSignal): Promise<string> {
  const base = (call.url || fallbackUrl || "http://127.0.0.1:11434").replace(/\/+$/, "");
  const body: Record<string, unknown> = { model: call.model, prompt: call.prompt, stream: false };
  if (call.keepAliveMin !== undefined) body.keep_alive = `${call.keepAliveMin}m`;
  const res = await fetch(`${base}/api/generate`, { method: "POST", body: JSON.stringify(body), headers: { "content-type": "application/json" }, signal });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`ollama._types.ResponseError: ${text} (status code: ${res.status})`);
  const parsed = JSON.parse(text) as { response?: unknown };
  return typeof parsed.response === "string" ? parsed.response : "";
}
