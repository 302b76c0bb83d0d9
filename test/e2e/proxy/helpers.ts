/**
 * Shared pieces of the proxy end-to-end tests: a real turnstile in front of the simulated Ollama
 * and ComfyUI (real sockets, ephemeral ports), and small readers for what a client sees.
 */
import { afterAll, beforeAll } from "bun:test";
import { connect } from "node:net";
import { type ComfySim, type SimPair, type SimPairOptions, startSimPair } from "../../../src/sim/index.ts";
import { fixtureText } from "../../sim/helpers.ts";
import { parseExposition, type Exposition } from "../../support/prom-parse.ts";
import { startTestTurnstile, type TestTurnstile, until } from "../../support/turnstile.ts";

export { until };

/** Simulator timings short enough that a whole image job takes a few hundred ms at most. */
export const FAST_SIMS: SimPairOptions = {
  ollama: { loadMs: 10, unloadMs: 10, tokenDelayMs: 5 },
  comfy: { jobMs: 100, freeDelayMs: 10 },
};

export interface Stack {
  pair: SimPair;
  t: TestTurnstile;
  stop(): Promise<void>;
}

/** Both simulators on one GPU and a turnstile in front of both. */
export async function startStack(env: Record<string, string> = {}, sims: SimPairOptions = {}): Promise<Stack> {
  const pair = await startSimPair({
    ...sims,
    ollama: { ...FAST_SIMS.ollama, ...sims.ollama },
    comfy: { ...FAST_SIMS.comfy, ...sims.comfy },
  });
  let t: TestTurnstile;
  try {
    t = startTestTurnstile({ OLLAMA_URL: pair.ollama.url, COMFY_URL: pair.comfy.url, ...env });
  } catch (err) {
    await pair.stop();
    throw err;
  }
  return {
    pair,
    t,
    async stop() {
      // Let a background image job finish first, so it never polls a stopped simulator after its test.
      await t.settled().catch(() => {});
      await t.close();
      await pair.stop();
    },
  };
}

/**
 * One stack for all of a file's tests: started before them, stopped after. Its first health probes
 * are over before any test runs (they would otherwise show in the upstreams' call logs).
 */
export function probedStackForFile(): () => Stack {
  let s: Stack | undefined;
  beforeAll(async () => {
    s = await startStack();
    await s.t.probed;
  });
  afterAll(async () => {
    await s?.stop();
  });
  return () => s!;
}

/** When ComfyUI's last /free arrived, once the image job is over (the end of the card's image turn). */
export async function lastFreeAt(s: Stack): Promise<number> {
  await s.t.settled();
  return s.pair.comfy.calls.filter((c) => c.path === "/free").at(-1)!.at;
}

/** When Ollama saw the request that carried `header: tag`. */
export function arrivedAt(s: Stack, header: string, tag: string): number {
  const call = s.pair.ollama.calls.find((c) => c.headers[header] === tag);
  if (!call) throw new Error(`Ollama never saw ${tag}`);
  return call.at;
}

/** Headers a hop may add, drop or rewrite: not part of what "passes through" means. */
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "date",
]);

export interface Seen {
  status: number;
  headers: [string, string][];
  body: Uint8Array;
}

/** Status, end-to-end headers (sorted) and raw body bytes of a response. */
export async function seen(res: Response): Promise<Seen> {
  const headers: [string, string][] = [];
  res.headers.forEach((v, k) => {
    if (!HOP_BY_HOP.has(k)) headers.push([k, v]);
  });
  headers.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return { status: res.status, headers, body: new Uint8Array(await res.arrayBuffer()) };
}

/** Bun's fetch option that keeps a compressed body as sent (Bun inflates by default). */
export type RawInit = RequestInit & { decompress?: boolean };

/** fetch without decompression or redirect following: the bytes the server really sent. */
export function rawFetch(url: string, init: RawInit = {}): Promise<Response> {
  return fetch(url, { redirect: "manual", decompress: false, ...init } as RequestInit);
}

export function postJson(url: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<Response> {
  return fetch(url, {
    method: "POST",
    body: JSON.stringify(body),
    headers: { "content-type": "application/json", ...headers },
    signal,
  });
}

/** The lock's view in /healthz: the SPEC's three fields. */
export interface Health {
  state: string;
  llm_inflight: number;
  image_pending: boolean;
}

export interface Healthz extends Health {
  upstreams: { ollama: string; comfy: string };
}

/** GET /healthz, whole. */
export async function healthz(base: string): Promise<Healthz> {
  const res = await fetch(`${base}/healthz`);
  if (res.status !== 200) throw new Error(`/healthz answered ${res.status}`);
  return (await res.json()) as Healthz;
}

/** GET /healthz, the lock's fields only (what most tests look at). */
export async function health(base: string): Promise<Health> {
  const { state, llm_inflight, image_pending } = await healthz(base);
  return { state, llm_inflight, image_pending };
}

/** GET /metrics, parsed by the strict exposition parser (so every scrape is also a format check). */
export async function scrape(base: string): Promise<Exposition> {
  const res = await fetch(`${base}/metrics`);
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
  return parseExposition(await res.text());
}

/** A /prompt body whose job runs `jobMs` on the simulated ComfyUI (its `sim_job_ms` knob). */
export function promptBody(jobMs: number): string {
  const { prompt } = JSON.parse(fixtureText("comfy-prompt-request.json")) as { prompt: unknown };
  return JSON.stringify({ prompt, extra_data: { sim_job_ms: jobMs } });
}

/** POST /prompt through the ComfyUI listener; resolves with ComfyUI's answer (the job keeps running). */
export async function startImageJob(t: TestTurnstile, jobMs: number): Promise<string> {
  const res = await fetch(`${t.comfyUrl}/prompt`, { method: "POST", body: promptBody(jobMs), headers: { "content-type": "application/json" } });
  const body = (await res.json()) as { prompt_id?: string };
  if (res.status !== 200 || !body.prompt_id) throw new Error(`/prompt answered ${res.status}: ${JSON.stringify(body)}`);
  return body.prompt_id;
}

/** Reads a streamed body chunk by chunk, noting when each network read arrived. */
export async function readTimed(res: Response, onChunk?: (text: string, index: number) => void | Promise<void>): Promise<{ text: string; at: number }[]> {
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const dec = new TextDecoder();
  const out: { text: string; at: number }[] = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return out;
    const text = dec.decode(value, { stream: true });
    out.push({ text, at: performance.now() });
    await onChunk?.(text, out.length - 1);
  }
}

export interface RawAnswer {
  status: number;
  /** Header names lower-cased; a repeated field keeps its last value. */
  headers: Record<string, string>;
  body: string;
}

/**
 * One request written byte for byte on a fresh connection, for what fetch cannot send (no Host,
 * an invalid Host, repeated fields, a websocket handshake with a chosen Host). The answer is read
 * up to its Content-Length, or to the close; a 101 as soon as its head is in.
 */
export async function rawHttp(base: string, request: string): Promise<RawAnswer> {
  const { hostname, port } = new URL(base);
  return new Promise<RawAnswer>((resolve, reject) => {
    const sock = connect(Number(port), hostname.replace(/^\[|\]$/g, ""), () => sock.write(request));
    let buf = Buffer.alloc(0);
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`no complete answer to ${JSON.stringify(request.split("\r\n")[0])}: ${JSON.stringify(buf.toString())}`));
    }, 5000);
    const done = (a: RawAnswer) => {
      clearTimeout(timer);
      sock.destroy();
      resolve(a);
    };
    const parse = (closed: boolean) => {
      const end = buf.indexOf("\r\n\r\n");
      if (end < 0) return closed ? done({ status: 0, headers: {}, body: buf.toString() }) : undefined;
      const [statusLine, ...lines] = buf.subarray(0, end).toString().split("\r\n");
      const headers: Record<string, string> = {};
      for (const l of lines) {
        const c = l.indexOf(":");
        headers[l.slice(0, c).trim().toLowerCase()] = l.slice(c + 1).trim();
      }
      const body = buf.subarray(end + 4);
      const status = Number(statusLine!.split(" ")[1]);
      // A switched protocol has no HTTP body: what follows is the new protocol's first bytes.
      if (status === 101) return done({ status, headers, body: body.toString("latin1") });
      const length = headers["content-length"] === undefined ? undefined : Number(headers["content-length"]);
      if (length !== undefined && body.length < length && !closed) return;
      if (length === undefined && !closed) return;
      done({ status, headers, body: body.subarray(0, length ?? body.length).toString() });
    };
    sock.on("data", (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      parse(false);
    });
    sock.on("close", () => parse(true));
    sock.on("error", () => parse(true));
  });
}

/** ComfyUI's websocket clients other than the turnstile's own socket (comfy/live-socket.ts): the relayed ones. */
export function relayedSockets(comfy: ComfySim): number {
  return comfy.socketIds().filter((id) => !id.startsWith("gpu-turnstile-")).length;
}
