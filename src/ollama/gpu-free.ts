/**
 * Requests on an inference route that use no local GPU (api-facts S1), decided from the body the
 * way Ollama itself decides, so a request it would run locally is never waved past the lock:
 *
 * - `cloud`: the model is a cloud model (`gpt-oss:120b-cloud`, `kimi-k2:1t:cloud`). Ollama sends
 *   the request on to ollama.com and loads nothing (server/cloud_proxy.go, modelref.ParseRef).
 *   The name only makes it a candidate: anybody can `ollama cp` a local model to a `-cloud` name,
 *   so it passes only once Ollama says that model is remote (remote-models.ts).
 * - `unload`: `/api/generate` with no prompt or `/api/chat` with no messages, and `keep_alive` 0.
 *   Ollama only expires the runner (O2). A load request (keep_alive not 0) uses the GPU.
 *
 * Every doubt answers "uses the GPU": the cost of a wrong "no" is a wait, of a wrong "yes" a model
 * loaded under ComfyUI. So the body is read as Go reads it — keys matched case-insensitively with
 * Go's folding (`"PROMPT"`, `"meſſages"` and `"\u212aeep_alive"` are Ollama's fields) — and
 * anything unusual (a field named twice, a non-ASCII model name, a prompt that is not a string,
 * images, a body that is not one JSON object) keeps the lock.
 *
 * Called on every buffered LLM body, so the usual chat pays two cheap checks and no parse.
 */

export type NoGpuReason = "cloud" | "unload";

/** What the body says: an unload, or a cloud-looking model (named as Ollama reads it) for Ollama to confirm. */
export type NoGpuCandidate = { reason: "unload" } | { reason: "cloud"; model: string };

/** What the running Ollama does, from its version: older ones load where newer ones do not. */
export interface OllamaAbilities {
  /** `-cloud`/`:cloud` names always go to ollama.com (v0.17.6, "don't require pulling stubs"). */
  cloud: boolean;
  /** The unload shortcut runs before any load (v0.3.11; before it, an unload loaded the model first). */
  unload: boolean;
}

const NO_ABILITIES: OllamaAbilities = { cloud: false, unload: false };

/** From /api/version's answer; an unknown version can do neither. */
export function abilitiesOf(version: string | undefined): OllamaAbilities {
  const m = version === undefined ? null : /^v?(\d+)\.(\d+)\.(\d+)/.exec(version);
  if (!m) return NO_ABILITIES;
  const v = [Number(m[1]), Number(m[2]), Number(m[3])] as const;
  return { cloud: atLeast(v, [0, 17, 6]), unload: atLeast(v, [0, 3, 11]) };
}

function atLeast(v: readonly number[], min: readonly number[]): boolean {
  for (let i = 0; i < 3; i++) if (v[i] !== min[i]) return v[i]! > min[i]!;
  return true;
}

/**
 * The routes whose body Ollama inflates when it is sent `Content-Encoding: zstd` (the cloud
 * middleware, v0.18.0 on). The others read the bytes as they come: a zstd body there is no JSON.
 */
const INFLATING: ReadonlySet<string> = new Set(["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/messages"]);

export function inflatesZstd(path: string): boolean {
  return INFLATING.has(path);
}

/** What every cloud name ends with (isCloudModel decides). */
const CLOUD_TAIL = /cloud[\t\n\v\f\r ]*$/i;

/** An unload body is a few dozen bytes; a larger one is not worth a parse to find out. */
const UNLOAD_BODY_MAX = 512;

/**
 * Why `body` (decoded, on the routed `path`) may use no local GPU, or undefined when it may.
 * `scanned`: the first model name the streaming scan found, the cheap pre-check for the cloud rule.
 */
export function noGpuReason(path: string, body: Uint8Array, scanned: string | undefined, can: OllamaAbilities): NoGpuCandidate | undefined {
  // A regex test, not toLowerCase(): the usual chat pays no allocation here.
  const cloudCandidate = can.cloud && scanned !== undefined && CLOUD_TAIL.test(scanned);
  const unloadPath = path === "/api/generate" ? "prompt" : path === "/api/chat" ? "messages" : undefined;
  const unloadCandidate = can.unload && unloadPath !== undefined && body.length <= UNLOAD_BODY_MAX && mayHaveZeroKeepAlive(body);
  if (!cloudCandidate && !unloadCandidate) return undefined;
  const fields = goFields(body);
  if (!fields) return undefined;
  const cloud = cloudCandidate ? cloudRequest(fields) : undefined;
  if (cloud !== undefined) return { reason: "cloud", model: cloud };
  if (unloadCandidate && isUnload(fields, unloadPath!)) return { reason: "unload" };
  return undefined;
}

/**
 * The model, when it is a cloud name. Ollama's /v1 middleware reads the exact key `model`, its
 * handlers the folded one: with one such key (goFields refuses two) both read the same.
 */
function cloudRequest(fields: Map<string, unknown>): string | undefined {
  const model = fields.get("MODEL");
  return typeof model === "string" && isCloudModel(model) ? model : undefined;
}

function isUnload(fields: Map<string, unknown>, what: "prompt" | "messages"): boolean {
  const content = fields.get(what === "prompt" ? "PROMPT" : "MESSAGES");
  const empty = what === "prompt" ? content === undefined || content === null || content === "" : isEmptyList(content);
  return empty && isEmptyList(fields.get("IMAGES")) && keepAliveIsZero(fields.get("KEEP_ALIVE"));
}

function isEmptyList(v: unknown): boolean {
  return v === undefined || v === null || (Array.isArray(v) && v.length === 0);
}

/**
 * api.Duration.UnmarshalJSON: a number is seconds (`time.Duration(t * 1e9)`, truncated), a string a
 * Go duration; absent or null is no keep_alive at all (the runner keeps its own: not an unload).
 * A string counts as zero only when every number in it is written with zeros ("0", "0s", "0.0m");
 * Go also reads "0.5ns" as 0, which is left to wait.
 */
export function keepAliveIsZero(v: unknown): boolean {
  if (typeof v === "number") return v >= 0 && Math.trunc(v * 1e9) === 0;
  if (typeof v !== "string") return false;
  return /^[-+]?(0|((0+(\.0*)?|\.0+)(ns|us|µs|μs|ms|s|m|h))+)$/.test(v);
}

/**
 * modelref.ParseRef with an explicit cloud source, and a base model.ParseName accepts. Names with
 * anything but printable ASCII are not cloud here (Go and JavaScript trim and fold them differently).
 */
export function isCloudModel(raw: string): boolean {
  const s = raw.replace(/^[\t\n\v\f\r ]+|[\t\n\v\f\r ]+$/g, "");
  if (!/^[\x21-\x7e]+$/.test(s)) return false;
  const base = cloudBase(s);
  if (base === undefined || hasSource(base)) return false;
  return /^([A-Za-z0-9][A-Za-z0-9._-]*\/){0,2}[A-Za-z0-9][A-Za-z0-9._-]*(:[A-Za-z0-9_][A-Za-z0-9._-]*)?$/.test(base);
}

/** The base of a name with an explicit cloud source (`x:cloud`, `x:tag-cloud`), else undefined. */
function cloudBase(s: string): string | undefined {
  const idx = s.lastIndexOf(":");
  if (idx < 0) return undefined;
  const suffix = s.slice(idx + 1);
  const lower = suffix.toLowerCase();
  if (lower === "cloud") return s.slice(0, idx);
  if (!suffix.includes("/") && lower.endsWith("-cloud")) return s.slice(0, idx + 1) + suffix.slice(0, -"-cloud".length);
  return undefined;
}

/** The name carries an explicit source (`:cloud`, `:local`, `:x-cloud`): a second one is an error to Ollama. */
function hasSource(s: string): boolean {
  const lower = s.slice(s.lastIndexOf(":") + 1).toLowerCase();
  return s.includes(":") && (lower === "local" || cloudBase(s) !== undefined);
}

/** The fields the rules read, by Go-folded name. */
const READ: ReadonlySet<string> = new Set(["MODEL", "PROMPT", "MESSAGES", "IMAGES", "KEEP_ALIVE"]);

// ignoreBOM: Go's decoder refuses a BOM, so it must not vanish here.
const decoder = new TextDecoder("utf-8", { ignoreBOM: true });

/**
 * The fields the rules read, by Go-folded name, or undefined when the body is not one JSON object
 * or names one of them twice: JSON.parse keeps the last of two equal keys and knows nothing of
 * folding, while Go's struct binding takes the last of any case and its /v1 middleware the last
 * exact `model`. No client sends two; a body that does is not worth out-guessing.
 */
function goFields(body: Uint8Array): Map<string, unknown> | undefined {
  const text = decoder.decode(body);
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (v === null || typeof v !== "object" || Array.isArray(v)) return undefined;
  const out = new Map<string, unknown>();
  for (const k of topLevelKeys(text)) {
    const f = goFold(k);
    if (!READ.has(f)) continue;
    if (out.has(f)) return undefined;
    out.set(f, (v as Record<string, unknown>)[k]);
  }
  return out;
}

/** The keys of a valid JSON object's top level, in order, repeats included. */
function topLevelKeys(text: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 /* " */) {
      const j = stringEnd(text, i + 1);
      if (depth === 1 && expectKey) {
        keys.push(JSON.parse(text.slice(i, j + 1)) as string);
        expectKey = false;
      }
      i = j;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      depth++;
      if (depth === 1) expectKey = true;
    } else if (c === 0x7d || c === 0x5d) depth--;
    else if (c === 0x2c /* , */ && depth === 1) expectKey = true;
  }
  return keys;
}

/**
 * The closing quote of the string whose contents start at `from`: found with indexOf, not a loop
 * over every character, since a 20 MiB prompt is one string (issue 26). A quote after an odd run
 * of backslashes is escaped.
 */
function stringEnd(text: string, from: number): number {
  for (let q = text.indexOf('"', from); ; q = text.indexOf('"', q + 1)) {
    let slashes = 0;
    while (text.charCodeAt(q - 1 - slashes) === 0x5c) slashes++;
    if (slashes % 2 === 0) return q;
  }
}

/** Go's encoding/json key folding (appendFoldedName): ASCII upper-cased, the rest ToUpper(ToLower(r)). */
export function goFold(key: string): string {
  let out = "";
  for (const ch of key) {
    const c = ch.codePointAt(0)!;
    if (c < 0x80) out += c >= 0x61 && c <= 0x7a ? String.fromCharCode(c - 32) : ch;
    // The only non-ASCII letters that fold onto ASCII ones: ſ→S, K (Kelvin)→K, İ→I, ı→I.
    else if (c === 0x17f) out += "S";
    else if (c === 0x212a) out += "K";
    else if (c === 0x130 || c === 0x131) out += "I";
    else out += ch;
  }
  return out;
}

/**
 * `alive"` followed by a value that may be zero (`0`, `"0s"`, `.0`, `-0`): what every zero
 * keep_alive spelled in lower-case ASCII looks like, so the usual body (no keep_alive, or "5m")
 * is never parsed. Found by its `v`, rarer in text than its `a`.
 */
function mayHaveZeroKeepAlive(body: Uint8Array): boolean {
  for (let i = body.indexOf(0x76, 3); i >= 0; i = body.indexOf(0x76, i + 1)) {
    if (body[i + 1] !== 0x65 || body[i + 2] !== 0x22 || body[i - 1] !== 0x69 || body[i - 2] !== 0x6c || body[i - 3] !== 0x61) continue;
    let j = i + 3;
    while (j < body.length && (body[j] === 0x20 || body[j] === 0x09 || body[j] === 0x0a || body[j] === 0x0d || body[j] === 0x3a || body[j] === 0x22 || body[j] === 0x2b || body[j] === 0x2d)) j++;
    if (body[j] === 0x30 || body[j] === 0x2e) return true;
  }
  return false;
}
