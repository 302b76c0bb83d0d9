/**
 * /healthz's "upstreams": each side as the health probes last found it — up, down (and back up
 * when it recovers), or disabled when its URL is empty — next to the SPEC's three lock fields.
 */
import { afterEach, expect, test } from "bun:test";
import { type OllamaSim, startComfySim, startOllamaSim } from "../../../src/sim/index.ts";
import { startTestTurnstile, type TestTurnstile } from "../../support/turnstile.ts";
import { healthz, until } from "./helpers.ts";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function turnstile(env: Record<string, string>): TestTurnstile {
  const t = startTestTurnstile({ HEALTH_INTERVAL: "50ms", ...env });
  cleanups.push(() => t.close());
  return t;
}

async function upstreamsSeen(base: string, want: { ollama: string; comfy: string }): Promise<void> {
  let last: unknown;
  await until(async () => JSON.stringify((last = (await healthz(base)).upstreams)) === JSON.stringify(want), `/healthz upstreams ${JSON.stringify(want)} (last ${JSON.stringify(last)})`);
}

test("Ollama up, ComfyUI not configured; Ollama goes down, then recovers", async () => {
  let ollama: OllamaSim = await startOllamaSim();
  cleanups.push(() => ollama.stop());
  const t = turnstile({ OLLAMA_URL: ollama.url, COMFY_URL: "" });
  await t.probed;
  expect(await healthz(t.ollamaUrl)).toEqual({
    state: "idle",
    llm_inflight: 0,
    image_pending: false,
    upstreams: { ollama: "up", comfy: "disabled" },
  });

  const port = Number(new URL(ollama.url).port);
  await ollama.stop();
  await upstreamsSeen(t.ollamaUrl, { ollama: "down", comfy: "disabled" });
  // The lock's fields are untouched by an upstream's health.
  expect(await healthz(t.ollamaUrl)).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });

  ollama = await startOllamaSim({ port });
  await upstreamsSeen(t.ollamaUrl, { ollama: "up", comfy: "disabled" });
});

test("ComfyUI down from the start, Ollama not configured: both listeners' view is the same", async () => {
  const comfy = await startComfySim();
  await comfy.stop();
  const ollama = await startOllamaSim();
  cleanups.push(() => ollama.stop());
  const t = turnstile({ OLLAMA_URL: "", COMFY_URL: comfy.url, HEALTH_INTERVAL: "0" });
  await t.probed;
  expect((await healthz(t.comfyUrl)).upstreams).toEqual({ ollama: "disabled", comfy: "down" });

  const both = turnstile({ OLLAMA_URL: ollama.url, COMFY_URL: comfy.url, HEALTH_INTERVAL: "0" });
  await both.probed;
  for (const base of [both.ollamaUrl, both.comfyUrl]) expect((await healthz(base)).upstreams).toEqual({ ollama: "up", comfy: "down" });
});

test("a pass-through request to an upstream the probe finds down gets a 502 after one try; one that only just went down is retried", async () => {
  const ollama = await startOllamaSim();
  const t = turnstile({ OLLAMA_URL: ollama.url, COMFY_URL: "", UPSTREAM_RETRY_TIMEOUT: "400ms", BACKOFF_INITIAL: "20ms", BACKOFF_MAX: "40ms", HEALTH_INTERVAL: "0" });
  await t.probed;
  const retries = () => t.metrics.upstreamRetries.get({ upstream: "ollama" });
  // Down since the last probe (which said up): the retries are kept for it.
  await ollama.stop();
  let res = await fetch(`${t.ollamaUrl}/api/tags`);
  expect(res.status).toBe(502);
  expect(retries()).toBeGreaterThan(0);
  expect(((await res.json()) as { error: string }).error).toContain("UPSTREAM_RETRY_TIMEOUT is 400ms");

  // Once a probe has found it down, Open WebUI's model list is answered at once, in Ollama's dialect.
  const probe = turnstile({ OLLAMA_URL: ollama.url, COMFY_URL: "", UPSTREAM_RETRY_TIMEOUT: "1h", HEALTH_INTERVAL: "0", LISTEN_OLLAMA_NESTED: "127.0.0.1:0" });
  await probe.probed;
  expect((await healthz(probe.ollamaUrl)).upstreams.ollama).toBe("down");
  // The nested listener's upstream is the same Ollama: it is answered at once too.
  for (const base of [probe.ollamaUrl, probe.listener("nested")!.url]) {
    res = await fetch(`${base}/api/tags`);
    expect(res.status).toBe(502);
    expect(((await res.json()) as { error: string }).error).toContain("not retried: the health probe finds it down");
  }
  expect(probe.metrics.upstreamRetries.get({ upstream: "ollama" })).toBe(0);
});

// Issue 26, point 13: the fail-fast above was read once, when the request arrived. A request that
// came before the probe's verdict — right after start, while /healthz already says "down" — then
// retried for the whole UPSTREAM_RETRY_TIMEOUT, a warning per backoff, although the probe had
// found the upstream down a moment later. Now each failed attempt asks again.
test("a pass-through request that arrived before the first probe's verdict gets its 502 once the probe finds the upstream down", async () => {
  const dead = await startOllamaSim();
  await dead.stop();
  const t = turnstile({ OLLAMA_URL: dead.url, COMFY_URL: "", UPSTREAM_RETRY_TIMEOUT: "10s", BACKOFF_INITIAL: "50ms", BACKOFF_MAX: "50ms", HEALTH_INTERVAL: "1h" });
  // Not awaiting t.probed: the race at start, as a client sees it.
  expect((await healthz(t.ollamaUrl)).upstreams.ollama).toBe("down");
  const t0 = performance.now();
  const res = await fetch(`${t.ollamaUrl}/api/tags`);
  expect(res.status).toBe(502);
  expect(performance.now() - t0).toBeLessThan(2000);
  expect(((await res.json()) as { error: string }).error).toContain("not retried: the health probe finds it down");
  // A few retries before the verdict at most, not one per 50 ms for 10 s.
  expect(t.metrics.upstreamRetries.get({ upstream: "ollama" })).toBeLessThan(20);
});
