/**
 * The stack of the image-job end-to-end tests: simulated Ollama and ComfyUI on one simulated GPU,
 * a real turnstile in front of them, and small probes into what happened (calls, lock
 * transitions, the image-job counter on /metrics). Everything waits on events or polls with a
 * deadline — never a bare sleep.
 */
import { expect } from "bun:test";
import { now } from "../../../src/sim/clock.ts";
import {
  type ComfySim,
  type ComfySimOptions,
  type OllamaSim,
  type OllamaSimOptions,
  type RecordedCall,
  SimGpu,
  startComfySim,
  startOllamaSim,
} from "../../../src/sim/index.ts";
import { IMAGE_JOB_OUTCOMES, type ImageJobOutcome } from "../../../src/observe/turnstile-metrics.ts";
import { parseExposition, sampleValue } from "../../support/prom-parse.ts";
import { startTestTurnstile, type TestTurnstile, until } from "../../support/turnstile.ts";
import { fixtureText } from "../../sim/helpers.ts";

export { until };

/** The request body a ComfyUI client sends, byte for byte (it carries its own prompt_id). */
export const PROMPT_REQUEST = fixtureText("comfy-prompt-request.json");
export const FIXTURE_PROMPT_ID = (JSON.parse(PROMPT_REQUEST) as { prompt_id: string }).prompt_id;

/** Timings that keep a whole image job in the tens of milliseconds. */
export const FAST_OLLAMA: OllamaSimOptions = { loadMs: 5, unloadMs: 20, tokenDelayMs: 2, tokens: 5 };
export const FAST_COMFY: ComfySimOptions = { jobMs: 40, freeDelayMs: 20 };

/** A fresh prompt_id per job (a canonical UUID, as ComfyUI and the turnstile require). */
export function newPromptId(): string {
  return crypto.randomUUID();
}

/** The fixture's workflow under another prompt_id, optionally with simulator hints in extra_data. */
export function promptBody(promptId: string, extra: Record<string, unknown> = {}, mutate?: (p: Record<string, unknown>) => void): string {
  const body = JSON.parse(PROMPT_REQUEST) as Record<string, unknown>;
  body.prompt_id = promptId;
  if (Object.keys(extra).length > 0) body.extra_data = extra;
  if (mutate) mutate(body.prompt as Record<string, unknown>);
  return JSON.stringify(body);
}

export interface Stack {
  gpu: SimGpu;
  ollama: OllamaSim | undefined;
  comfy: ComfySim | undefined;
  t: TestTurnstile;
  /** Sim-clock times (same clock as `calls[].at` and the ledger) at which the lock became idle. */
  idleAt: number[];
  /** Every lock transition, with its sim-clock time. */
  transitions: { from: string; to: string; at: number }[];
  stop(): Promise<void>;
}

export interface StackOptions {
  /** false = no simulator and no OLLAMA_URL. */
  ollama?: OllamaSimOptions | false;
  comfy?: ComfySimOptions | false;
  env?: Record<string, string>;
  /** Run once the simulators are up, before the turnstile starts (what it finds at start). */
  beforeStart?: (sims: { gpu: SimGpu; ollama: OllamaSim | undefined; comfy: ComfySim | undefined }) => Promise<void>;
}

/**
 * Both simulators on one GPU and a turnstile in front. The start-up probes are awaited and the
 * call logs cleared, so a test sees only the calls its own requests caused.
 */
export async function startStack(opts: StackOptions = {}): Promise<Stack> {
  const gpu = new SimGpu();
  const ollama = opts.ollama === false ? undefined : await startOllamaSim({ ...FAST_OLLAMA, ...opts.ollama, gpu });
  const comfy = opts.comfy === false ? undefined : await startComfySim({ ...FAST_COMFY, ...opts.comfy, gpu });
  await opts.beforeStart?.({ gpu, ollama, comfy });
  const t = startTestTurnstile({
    OLLAMA_URL: ollama?.url ?? "",
    COMFY_URL: comfy?.url ?? "",
    ...opts.env,
  });
  const idleAt: number[] = [];
  const transitions: Stack["transitions"] = [];
  t.lock.onEvent((e) => {
    if (e.type !== "transition") return;
    const at = now();
    transitions.push({ from: e.from, to: e.to, at });
    if (e.to === "idle") idleAt.push(at);
  });
  await t.probed;
  ollama?.clearCalls();
  comfy?.clearCalls();
  return {
    gpu,
    ollama,
    comfy,
    t,
    idleAt,
    transitions,
    async stop() {
      await t.close();
      await Promise.all([ollama?.stop(), comfy?.stop()]);
    },
  };
}

export function postJson(url: string, body: string | object, signal?: AbortSignal): Promise<Response> {
  return fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
    signal,
  });
}

/** A non-streamed chat through the turnstile's Ollama listener. */
export function chat(t: TestTurnstile, model = "llama3.2", signal?: AbortSignal): Promise<Response> {
  return postJson(`${t.ollamaUrl}/api/chat`, { model, stream: false, messages: [{ role: "user", content: "hi" }] }, signal);
}

/** POST /prompt (or /api/prompt) through the turnstile's ComfyUI listener. */
/** A chat with `key` as its API key, to Ollama's `/api/chat` or OpenAI's `/v1/chat/completions`. */
export function keyedChat(t: TestTurnstile, key: string, opts: { path?: string; stream?: boolean } = {}): Promise<Response> {
  const body = { model: "llama3.2", messages: [{ role: "user", content: "hi" }], ...(opts.stream === undefined ? {} : { stream: opts.stream }) };
  return fetch(`${t.ollamaUrl}${opts.path ?? "/api/chat"}`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${key}` }, body: JSON.stringify(body) });
}

/**
 * An LLM quota's refusal of `key`'s next chat, in both API shapes: 429; Ollama's error says `why`
 * and never the key (not even its first 8 characters); OpenAI's type is quota_exceeded. Returns
 * Ollama's Retry-After, in seconds.
 */
export async function expectLlmQuotaRefused(t: TestTurnstile, key: string, why: string): Promise<number> {
  const ollama = await keyedChat(t, key);
  expect(ollama.status).toBe(429);
  const retryAfter = Number(ollama.headers.get("retry-after"));
  const error = ((await ollama.json()) as { error: string }).error;
  expect(error).toContain(why);
  expect(error).not.toContain(key.slice(0, 8));
  const openai = await keyedChat(t, key, { path: "/v1/chat/completions" });
  expect(openai.status).toBe(429);
  expect(((await openai.json()) as { error: { type: string } }).error.type).toBe("quota_exceeded");
  return retryAfter;
}

export function submit(t: TestTurnstile, body: string, opts: { path?: string; signal?: AbortSignal } = {}): Promise<Response> {
  return postJson(`${t.comfyUrl}${opts.path ?? "/prompt"}`, body, opts.signal);
}

/** `gpu_turnstile_image_jobs_total` per outcome, read through /metrics like a scraper would. */
export async function jobCounts(t: TestTurnstile): Promise<Record<ImageJobOutcome, number>> {
  const base = t.comfyUrl || t.ollamaUrl;
  const text = await (await fetch(`${base}/metrics`)).text();
  const parsed = parseExposition(text);
  const out = {} as Record<ImageJobOutcome, number>;
  for (const o of IMAGE_JOB_OUTCOMES) out[o] = sampleValue(parsed, "gpu_turnstile_image_jobs_total", { outcome: o }) ?? NaN;
  return out;
}

export function total(counts: Record<string, number>): number {
  return Object.values(counts).reduce((a, b) => a + b, 0);
}

/** Calls to `path` (and optionally `method`), in arrival order. */
export function callsTo(calls: readonly RecordedCall[], path: string | RegExp, method?: string): RecordedCall[] {
  return calls.filter((c) => (typeof path === "string" ? c.path === path : path.test(c.path)) && (!method || c.method === method));
}

/** `METHOD path` of each call, for readable sequence assertions. */
export function callNames(calls: readonly RecordedCall[]): string[] {
  return calls.map((c) => `${c.method} ${c.path}`);
}

/** Log lines at warn (the text format puts the level right after the timestamp). */
export function warnLines(t: TestTurnstile, match?: string | RegExp): string[] {
  return t.logLines.filter((l) => /\bWARN\b/i.test(l) && (match === undefined || (typeof match === "string" ? l.includes(match) : match.test(l))));
}

export async function waitFor<T>(fn: () => T | Promise<T>, what: string, timeoutMs = 5000): Promise<NonNullable<T>> {
  let v: T | undefined;
  await until(async () => Boolean((v = await fn())), what, timeoutMs);
  return v as NonNullable<T>;
}

/** Resolves (with the moment) when `p` settles, to check ordering without racing. */
export function settledAt<T>(p: Promise<T>): { done: () => boolean; at: () => number | undefined } {
  let at: number | undefined;
  p.then(
    () => (at = now()),
    () => (at = now()),
  );
  return { done: () => at !== undefined, at: () => at };
}

/** Refuses the turnstile's own ComfyUI socket (its clientId), so only polling or relayed frames are left. */
export function refuseOwnSocket(comfy: ComfySim): void {
  for (const path of ["/ws", "/api/ws"]) {
    comfy.override("GET", path, (req) => (new URL(req.url).searchParams.get("clientId")?.startsWith("gpu-turnstile-") ? new Response("no", { status: 503 }) : undefined));
  }
}
