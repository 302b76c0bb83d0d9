/**
 * zstd bodies of a few hundred bytes that inflate to 20 MiB each (issue 26: 50 of them made /healthz
 * answer 10 s late and the process grow by 700 MiB). Each names a cloud model at its very end, so
 * the turnstile must inflate all of it to decide: it does so a chunk at a time, within one budget
 * shared by all requests, and keeps answering meanwhile.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startUpstreamHost, type UpstreamHost } from "../../../bench/lib/upstreams.ts";
import { MAX_INFLATED_BYTES } from "../../../src/http/zstd-body.ts";
import { startTestTurnstile, type TestTurnstile } from "../../support/turnstile.ts";

// The simulators in a process of their own (the benchmark's upstream host): they inflate each body
// too, and in this process their work would be counted against the turnstile's /healthz.
let ups: UpstreamHost;
let t: TestTurnstile;
let dir: string;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "zstd-flood-"));
  ups = await startUpstreamHost(process.execPath, { ollama: { o: { loadMs: 10, unloadMs: 10, tokenDelayMs: 1, tokens: 3 } }, comfy: { c: { jobMs: 100, freeMs: 10 } }, shareGpu: [["o", "c"]], noCallLog: ["ollama.o", "comfy.c"] }, join(dir, "upstreams.log"));
  t = startTestTurnstile({ OLLAMA_URL: ups.urls["ollama.o"]!, COMFY_URL: ups.urls["comfy.c"]!, LOGLEVEL: "warn" });
  await t.probed;
});
afterAll(async () => {
  await t?.close();
  await ups?.stop();
  rmSync(dir, { recursive: true, force: true });
});
const s = () => ({ t });

/** A body of exactly `size` bytes whose model comes last. */
function inflatingBody(size: number, model = "gpt-oss:120b-cloud"): Uint8Array {
  const tail = `","model":"${model}"}`;
  const head = '{"input":"';
  return Bun.zstdCompressSync(head + "a".repeat(size - head.length - tail.length) + tail, { level: 19 });
}

/** The slowest /healthz answer on each listener while `work` runs. */
async function healthzWhile(bases: string[], work: Promise<unknown>): Promise<number> {
  let done = false;
  void work.finally(() => (done = true));
  let worst = 0;
  while (!done) {
    const t0 = performance.now();
    const answers = await Promise.all(bases.map((b) => fetch(`${b}/healthz`).then((r) => r.status)));
    worst = Math.max(worst, performance.now() - t0);
    expect(answers).toEqual(bases.map(() => 200));
    await Bun.sleep(20);
  }
  return worst;
}

test("50 concurrent 20 MiB zstd bodies naming a cloud model: every one is answered, /healthz on both listeners within 1 s throughout", async () => {
  const body = inflatingBody(MAX_INFLATED_BYTES);
  expect(body.length).toBeLessThan(1000);
  const sends = Array.from({ length: 50 }, () =>
    fetch(`${s().t.ollamaUrl}/v1/responses`, { method: "POST", body: body as BodyInit, headers: { "content-type": "application/json", "content-encoding": "zstd" } }).then(async (r) => {
      await r.arrayBuffer();
      return r.status;
    }),
  );
  const all = Promise.all(sends);
  const worst = await healthzWhile([s().t.ollamaUrl, s().t.comfyUrl], all);
  expect(await all).toEqual(sends.map(() => 200));
  expect(worst).toBeLessThan(1000);
  // Read whole, they were cloud requests: none took the GPU.
  expect(t.lock.state).toBe("idle");
}, 120_000);
