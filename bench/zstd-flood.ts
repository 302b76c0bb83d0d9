/**
 * Issue 26: N concurrent zstd bodies of ~700 bytes that each inflate to 20 MiB (Ollama's cap) and
 * name a cloud model at their very end, so the turnstile must inflate all of each to decide. While
 * they run, /healthz is asked on both listeners every 50 ms; reported: its slowest and median
 * answer, how long the N requests took, their statuses, and the turnstile's peak RSS (VmHWM).
 *
 *   npx bun bench/zstd-flood.ts [N ...]          (default: 50 200)
 *   TURNSTILE_DIR=/path/to/other/checkout npx bun bench/zstd-flood.ts   (measure another version)
 *
 * The simulators run in their own process (upstream-host.ts), the turnstile in another, from
 * source; this process only sends and times.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { memoryOf, stopAll } from "./lib/proc.ts";
import { startUpstreamHost } from "./lib/upstreams.ts";
import { startTurnstileProc } from "./subjects.ts";

const bun = process.execPath;
const counts = process.argv.slice(2).map(Number).filter((n) => n > 0);
const cwd = process.env.TURNSTILE_DIR ?? join(import.meta.dir, "..");
const SIZE = 20 << 20;

function inflatingBody(): Uint8Array {
  const head = '{"input":"';
  const tail = '","model":"gpt-oss:120b-cloud"}';
  return Bun.zstdCompressSync(head + "a".repeat(SIZE - head.length - tail.length) + tail, { level: 19 });
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? NaN;
}

async function round(n: number, body: Uint8Array): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "zstd-flood-"));
  const ups = await startUpstreamHost(bun, { ollama: { o: { loadMs: 10, unloadMs: 10, tokenDelayMs: 1, tokens: 3 } }, comfy: { c: { jobMs: 100, freeMs: 10 } }, shareGpu: [["o", "c"]], noCallLog: ["ollama.o", "comfy.c"] }, join(dir, "upstreams.log"));
  const t = await startTurnstileProc({
    cmd: [bun, "src/main.ts"],
    cwd,
    ollama: { name: "ollama", url: ups.urls["ollama.o"]! },
    comfy: { name: "comfy", url: ups.urls["comfy.c"]! },
    dir,
    logFile: join(dir, "turnstile.log"),
    presetFetchLimit: true,
  });
  try {
    // The first health probe has read Ollama's version (cloud names are cloud from 0.17.6 on).
    await Bun.sleep(500);
    const bases = [t.urls.ollama!, t.urls.comfy!];
    const rssBefore = memoryOf(t.servingPid)?.rssKiB ?? NaN;
    const t0 = performance.now();
    const statuses = new Map<number | string, number>();
    const sends = Array.from({ length: n }, () =>
      fetch(`${t.urls.ollama}/v1/responses`, { method: "POST", body: body as BodyInit, headers: { "content-type": "application/json", "content-encoding": "zstd" } })
        .then(async (r) => (await r.arrayBuffer(), r.status))
        .catch(() => "error" as const)
        .then((s) => void statuses.set(s, (statuses.get(s) ?? 0) + 1)),
    );
    let done = false;
    const all = Promise.all(sends).then(() => (done = true));
    const latencies: number[] = [];
    while (!done) {
      await Promise.all(
        bases.map(async (b) => {
          const s = performance.now();
          await (await fetch(`${b}/healthz`)).arrayBuffer();
          latencies.push(performance.now() - s);
        }),
      );
      await Bun.sleep(50);
    }
    await all;
    const wall = performance.now() - t0;
    const mem = memoryOf(t.servingPid);
    const answered = [...statuses].map(([s, c]) => `${c}× ${s}`).join(", ");
    return `| ${n} | ${Math.max(...latencies).toFixed(0)} ms | ${median(latencies).toFixed(0)} ms | ${(wall / 1000).toFixed(1)} s | ${answered} | ${(rssBefore / 1024).toFixed(0)} MiB | ${((mem?.hwmKiB ?? NaN) / 1024).toFixed(0)} MiB |`;
  } finally {
    await t.stop();
    await ups.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

try {
  const body = inflatingBody();
  console.log(`body: ${body.length} bytes of zstd, ${SIZE} bytes inflated; turnstile from ${cwd}`);
  console.log("| bodies | slowest /healthz | median /healthz | all answered after | answers | RSS before | peak RSS |");
  console.log("|---:|---:|---:|---:|---|---:|---:|");
  for (const n of counts.length ? counts : [50, 200]) console.log(await round(n, body));
} finally {
  await stopAll();
}
