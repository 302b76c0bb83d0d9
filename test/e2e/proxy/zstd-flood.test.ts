/**
 * zstd bodies of a few hundred bytes that inflate to 20 MiB each (issue 26: 50 of them made /healthz
 * answer 10 s late and the process grow by 700 MiB). Each names a cloud model at its very end, so
 * the turnstile must inflate all of it to decide: it does so a chunk at a time, within one budget
 * shared by all requests, and keeps answering meanwhile.
 *
 * What is measured is the turnstile's own delay, not the machine's. The turnstile runs as a process
 * of its own (as the benchmark runs it), the simulators in another (they inflate each body too).
 * Each /healthz is asked at the same moment as a control: a bare Bun server in a third process.
 * Measured under `bun test --parallel` on a busy box (load ~6 on 2 cores): this process stalled up
 * to 1 s at a time (50 bodies sent, answers and timers on one loop, other files' GC), which a
 * /healthz timed from here counted against the turnstile whatever it did. Those stalls delay the
 * control's answer just as much, so the bound is on /healthz's lead over the control: with the
 * old synchronous inflate (10 s per 50 bodies) it fails by far.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, spawnChild, waitHttp, type Child } from "../../../bench/lib/proc.ts";
import { startUpstreamHost, type UpstreamHost } from "../../../bench/lib/upstreams.ts";
import { startTurnstileProc, type ProxyProc } from "../../../bench/subjects.ts";
import { MAX_INFLATED_BYTES } from "../../../src/http/zstd-body.ts";
import { until } from "../../support/turnstile.ts";

const ROOT = join(import.meta.dir, "../../..");
let ups: UpstreamHost;
let t: ProxyProc;
let control: Child;
let controlUrl: string;
let dir: string;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "zstd-flood-"));
  const port = freePort();
  controlUrl = `http://127.0.0.1:${port}`;
  control = spawnChild({ name: "control", cmd: [process.execPath, "-e", `Bun.serve({ hostname: "127.0.0.1", port: ${port}, fetch: () => new Response("ok") })`] });
  ups = await startUpstreamHost(process.execPath, { ollama: { o: { loadMs: 10, unloadMs: 10, tokenDelayMs: 1, tokens: 3 } }, comfy: { c: { jobMs: 100, freeMs: 10 } }, shareGpu: [["o", "c"]], noCallLog: ["ollama.o", "comfy.c"] }, join(dir, "upstreams.log"));
  t = await startTurnstileProc({
    cmd: [process.execPath, "src/main.ts"],
    cwd: ROOT,
    ollama: { name: "ollama", url: ups.urls["ollama.o"]! },
    comfy: { name: "comfy", url: ups.urls["comfy.c"]! },
    dir,
    logFile: join(dir, "turnstile.log"),
    presetFetchLimit: true,
    // A cloud-looking model is confirmed by asking Ollama (/api/show) within PROBE_TIMEOUT; on a busy
    // box the simulator, inflating the bodies forwarded before, answered late, and the turnstile
    // rightly took the lock for them (fail closed). Here the question is /healthz, not that bound.
    extraEnv: { PROBE_TIMEOUT: "30s" },
  });
  await waitHttp(`${controlUrl}/`, 15_000, "control server");
  // Cloud names are known as cloud once the first probe has read Ollama's version.
  await until(async () => (await status()).upstreams.ollama?.version != null, "the first probe of Ollama", 15_000);
}, 60_000);
afterAll(async () => {
  await t?.stop();
  await ups?.stop();
  await control?.stop(1000);
  rmSync(dir, { recursive: true, force: true });
});

type Status = { state: string; upstreams: Record<string, { version: string | null }>; history: { state: string }[] };
async function status(): Promise<Status> {
  return (await (await fetch(`${t.urls.comfy}/turnstile/status`)).json()) as Status;
}

/** A body of exactly `size` bytes whose model comes last. */
function inflatingBody(size: number, model = "gpt-oss:120b-cloud"): Uint8Array {
  const tail = `","model":"${model}"}`;
  const head = '{"input":"';
  return Bun.zstdCompressSync(head + "a".repeat(size - head.length - tail.length) + tail, { level: 19 });
}

async function timed(url: string): Promise<{ ms: number; status: number }> {
  const t0 = performance.now();
  const r = await fetch(url);
  await r.arrayBuffer();
  return { ms: performance.now() - t0, status: r.status };
}

/** While `work` runs: each round asks /healthz on every listener and the control at the same moment. */
async function healthzWhile(bases: string[], work: Promise<unknown>): Promise<{ lead: number; raw: number; control: number; rounds: number }> {
  let done = false;
  void work.finally(() => (done = true));
  const worst = { lead: 0, raw: 0, control: 0, rounds: 0 };
  while (!done) {
    const [ctl, ...answers] = await Promise.all([timed(`${controlUrl}/`), ...bases.map((b) => timed(`${b}/healthz`))]);
    expect(answers.map((a) => a.status)).toEqual(bases.map(() => 200));
    const slowest = Math.max(...answers.map((a) => a.ms));
    worst.lead = Math.max(worst.lead, slowest - ctl!.ms);
    worst.raw = Math.max(worst.raw, slowest);
    worst.control = Math.max(worst.control, ctl!.ms);
    worst.rounds++;
    await Bun.sleep(20);
  }
  return worst;
}

test("50 concurrent 20 MiB zstd bodies naming a cloud model: every one is answered, /healthz on both listeners within 1 s throughout", async () => {
  const body = inflatingBody(MAX_INFLATED_BYTES);
  expect(body.length).toBeLessThan(1000);
  const sends = Array.from({ length: 50 }, () =>
    fetch(`${t.urls.ollama}/v1/responses`, { method: "POST", body: body as BodyInit, headers: { "content-type": "application/json", "content-encoding": "zstd" } }).then(async (r) => {
      await r.arrayBuffer();
      return r.status;
    }),
  );
  const all = Promise.all(sends);
  const worst = await healthzWhile([t.urls.ollama!, t.urls.comfy!], all);
  expect(await all).toEqual(sends.map(() => 200));
  // Asked throughout, not once before the flood was over.
  expect(worst.rounds).toBeGreaterThan(5);
  expect({ ...worst, lead: worst.lead < 1000 }).toEqual({ ...worst, lead: true });
  // Read whole, they were cloud requests: none took the GPU.
  const s = await status();
  expect({ state: s.state, held: s.history.filter((h) => h.state !== "idle") }).toEqual({ state: "idle", held: [] });
}, 120_000);
