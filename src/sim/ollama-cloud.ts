/**
 * What the simulated Ollama sends on to ollama.com (api-facts S1): cloud models (`x:cloud`,
 * `x:tag-cloud`), answered without loading anything locally, and the experimental web search and
 * fetch routes. Also the zstd request bodies the /v1 middleware inflates (Codex CLI sends them).
 */
import { zstdDecompressSync } from "node:zlib";
import type { Model } from "./ollama-models.ts";
import { jsonRes } from "./ollama-wire.ts";

/** modelref.ParseRef: the last `:` part is `cloud`, or a tag ending in `-cloud`. */
export function isCloudName(name: string): boolean {
  const n = name.trim();
  const colon = n.lastIndexOf(":");
  if (colon < 0) return false;
  const tag = n.slice(colon + 1).trim().toLowerCase();
  return tag === "cloud" || (!tag.includes("/") && tag.endsWith("-cloud"));
}

/** Where a cloud model runs, as /api/tags and /api/show say it (`remote_host`). */
export const CLOUD_HOST = "https://ollama.com:443";

/** A cloud model's name on ollama.com (`remote_model`): its name without the cloud source. */
export function remoteModelName(name: string): string {
  const n = name.trim();
  const colon = n.lastIndexOf(":");
  const tag = n.slice(colon + 1);
  if (tag.toLowerCase() === "cloud") return n.slice(0, colon);
  return `${n.slice(0, colon + 1)}${tag.slice(0, -"-cloud".length)}`;
}

/** The remote_* fields of a model's /api/tags and /api/show entries (none for a local model). */
export function remoteFields(m: Model): Record<string, string> {
  return m.cloud ? { remote_model: m.remoteModel ?? remoteModelName(m.name), remote_host: CLOUD_HOST } : {};
}

/** A stand-in catalog entry for a cloud model: it answers everything and occupies no VRAM. */
export function cloudModel(name: string, at: number): Model {
  return {
    name: name.trim(),
    size: 0,
    vramBytes: 0,
    family: "cloud",
    parameterSize: "",
    quantization: "",
    contextLength: 131_072,
    embeddingLength: 768,
    capabilities: ["completion", "tools", "embedding", "thinking"],
    digest: "",
    runnerContext: 131_072,
    modifiedAt: at,
    cloud: true,
  };
}

/** Ollama's cap on an inflated body (cloud_proxy.go maxDecompressedBodySize). */
const MAX_INFLATED = 20 << 20;

/**
 * cloudPassthroughMiddleware: a /v1 inference route inflates `Content-Encoding: zstd` before reading the
 * body; the native routes do not (their JSON binding then fails). A Response is the 400 it answers.
 */
export function inflateRequest(path: string, encoding: string | null, body: Uint8Array<ArrayBuffer>): Uint8Array<ArrayBuffer> | Response {
  // routes.go: the routes registered with cloudPassthroughMiddleware (transcriptions is not).
  if (encoding !== "zstd" || !/^\/v1\/(chat\/completions|completions|embeddings|responses|messages)$/.test(path)) return body;
  try {
    return new Uint8Array(zstdDecompressSync(body, { maxOutputLength: MAX_INFLATED }));
  } catch (err) {
    const tooLarge = (err as { code?: unknown }).code === "ERR_BUFFER_TOO_LARGE";
    return jsonRes(400, { error: tooLarge ? "http: request body too large" : "failed to decompress request body" });
  }
}

function bodyText(body: Uint8Array): string {
  return new TextDecoder().decode(body).trim();
}

/** POST /api/experimental/web_search: ollama.com's results, canned. */
export function webSearch(body: Uint8Array): Response {
  const text = bodyText(body);
  if (text === "") return jsonRes(400, { error: "missing request body" });
  let query = "";
  try {
    const v = JSON.parse(text) as { query?: unknown };
    if (typeof v.query === "string") query = v.query;
  } catch {
    // ollama.com would answer; the query is only echoed
  }
  return jsonRes(200, { results: [{ title: `Results for ${query}`, url: "https://ollama.com/search", content: "Rayleigh scattering makes the sky blue." }] });
}

/** POST /api/experimental/web_fetch. */
export function webFetch(body: Uint8Array): Response {
  if (bodyText(body) === "") return jsonRes(400, { error: "missing request body" });
  return jsonRes(200, { title: "Ollama", content: "Get up and running with large language models.", links: ["https://ollama.com/"] });
}
