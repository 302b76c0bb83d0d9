/**
 * Experiments behind the notes in docs/BENCHMARKS.md (not part of `bun run bench`):
 *
 *   npx bun bench/experiments/run.ts throughput [VARIANTS] [C]   proxy variants from bare Bun to the turnstile,
 *                                                 c=1 and c=16 (or the list C)
 *   npx bun bench/experiments/run.ts memory       RSS with 1,000 open streams: turnstile in wait / reject mode, variants
 *   npx bun bench/experiments/run.ts profile [DIR] CPU profile of the turnstile (or the checkout in DIR) under
 *                                                 c=16 small-JSON load; `bun bench/experiments/profile-split.ts`
 *                                                 sorts its samples into the stages of a request
 *   npx bun bench/experiments/run.ts startup      where the compiled binary's start-up time goes
 *   npx bun bench/experiments/run.ts dashboards   CPU per small chat and RSS with 0 and 100 /turnstile/events readers
 *   npx bun bench/experiments/run.ts floor [DIR|BINARY ...] [--rounds N]   issue 22's setup (scenario 8): the floor
 *                                                 (bench/bare-proxy.ts), one-worker nginx and a turnstile per
 *                                                 checkout DIR (`bun DIR/src/main.ts`) or compiled BINARY, default
 *                                                 this checkout, or `variant:NAME` (variant-proxy.ts); upstream
 *                                                 answering from memory, wrk c=16, 4 s rounds
 *   npx bun bench/experiments/run.ts startup-ab BINARY... [--runs N]   compiled binaries' exec → first /healthz,
 *                                                 taking turns with a minimal compiled Bun.serve, N rounds (default 20)
 *   npx bun bench/experiments/hot-path.ts         the pure steps of one pass-through request, timed alone
 *   npx bun bench/experiments/run.ts ab DIR [DIR2] [N]   CPU per request at c=16: the turnstile in DIR (a copy
 *                                                 of an older commit, e.g. `git archive`) against DIR2 (default:
 *                                                 this checkout) and one-worker nginx, N alternating rounds (default 5)
 *
 * Same processes and rules as the benchmark: loopback only, every loop bounded.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { findWrk, runLoad } from "../lib/load.ts";
import { freePort, memoryOf, spawnChild, stopAll, threadCpuMs, treeCpuMs, waitHttp, type Memory } from "../lib/proc.ts";
import { median } from "../lib/stats.ts";
import { startUpstreamHost } from "../lib/upstreams.ts";
import { findNginx, startNginx } from "../nginx.ts";
import { floorRounds, ratiosByRound, type FloorSubject } from "../scenarios/floor.ts";
import { manyStreams } from "../scenarios/many-streams.ts";
import { buildMinimal, startupTimes } from "../scenarios/startup.ts";
import { baseEnv, startBareProxy, startMemoryUpstream, startTurnstileProc, type ProxyProc } from "../subjects.ts";

const ROOT = resolve(import.meta.dir, "../..");
const OUT = join(ROOT, "bench", "out", "experiments");
const BUN = process.execPath;
/** Built by `bun run bench` (scenario 6) or `bun build.ts --target linux-x64`. */
const BINARY = join(ROOT, "dist", "gpu-turnstile-linux-x64");
const note = (s: string) => process.stderr.write(`${s}\n`);

async function startVariant(variant: string, upstream: string): Promise<ProxyProc> {
  const port = freePort();
  const child = spawnChild({
    name: `variant-${variant}`,
    cmd: [BUN, join(ROOT, "bench", "experiments", "variant-proxy.ts")],
    env: { ...baseEnv(OUT), BUN_CONFIG_MAX_HTTP_REQUESTS: "65535", VARIANT: variant, UPSTREAM: upstream, PORT: String(port) },
    logFile: join(OUT, `variant-${variant}.log`),
  });
  const url = `http://127.0.0.1:${port}`;
  await waitHttp(`${url}/api/version`, 10_000, `variant ${variant}`);
  return { pid: child.pid, servingPid: child.pid, urls: { up: url }, memory: () => memoryOf(child.pid), stop: () => child.stop() };
}

async function throughput(): Promise<void> {
  const up = await startUpstreamHost(BUN, { ollama: { main: { loadMs: 0, unloadMs: 50, tokenDelayMs: 5, tokens: 20 } }, comfy: {}, shareGpu: [], noCallLog: ["ollama.main"] }, join(OUT, "upstreams.log"));
  const upstream = up.urls["ollama.main"]!;
  const subjects: [string, string, () => Promise<void>, number?][] = [["direct", upstream, async () => {}]];
  const nginx = findNginx();
  if (nginx) {
    const ng = await startNginx(nginx, join(OUT, "nginx"), [{ name: "up", upstream }], { workers: "auto", keepalive: 64 });
    subjects.push(["nginx (2 workers)", ng.urls.up!, () => ng.stop(), ng.pid]);
    const ng1 = await startNginx(nginx, join(OUT, "nginx1"), [{ name: "up", upstream }], { workers: 1, keepalive: 64 });
    subjects.push(["nginx (1 worker)", ng1.urls.up!, () => ng1.stop(), ng1.pid]);
  }
  const only = process.argv[3]?.split(",");
  for (const v of ["bare", "rewrap", "hono", "wrapped", "lean", "pool", "static"].filter((x) => !only || only.includes(x))) {
    const p = await startVariant(v, upstream);
    subjects.push([`variant ${v}`, p.urls.up!, () => p.stop(), p.pid]);
  }
  const t = await startTurnstileProc({ cmd: [BUN, "src/main.ts"], cwd: ROOT, ollama: { name: "up", url: upstream }, dir: OUT, logFile: join(OUT, "turnstile.log"), presetFetchLimit: true });
  subjects.push(["turnstile", t.urls.up!, () => t.stop(), t.servingPid]);
  const wrk = findWrk();
  const rounds = 3;
  for (const c of (process.argv[4] ?? "1,16").split(",").map(Number)) {
    const rps = new Map<string, number[]>();
    const p50 = new Map<string, number[]>();
    const cpu = new Map<string, number[]>();
    for (let r = 0; r < rounds; r++) {
      for (const [name, url, , pid] of subjects) {
        await runLoad({ url: `${url}/api/tags`, connections: c, seconds: 1 }, wrk);
        const c0 = pid ? treeCpuMs(pid) : 0;
        const res = await runLoad({ url: `${url}/api/tags`, connections: c, seconds: 4 }, wrk);
        if (pid) cpu.set(name, [...(cpu.get(name) ?? []), ((treeCpuMs(pid) - c0) * 1000) / res.requests]);
        rps.set(name, [...(rps.get(name) ?? []), res.rps]);
        p50.set(name, [...(p50.get(name) ?? []), res.p50Ms]);
      }
    }
    note(`\nc=${c}, GET /api/tags, median of ${rounds} rounds × 4 s`);
    for (const [name] of subjects) {
      note(`  ${name.padEnd(18)} ${Math.round(median(rps.get(name)!)).toString().padStart(6)} req/s  p50 ${median(p50.get(name)!).toFixed(3)} ms  CPU ${cpu.has(name) ? median(cpu.get(name)!).toFixed(0) : "—"} µs/req   (rounds: ${rps.get(name)!.map((x) => Math.round(x)).join(", ")})`);
    }
  }
  for (const [, , stop] of subjects) await stop();
  await up.stop();
}

async function memory(): Promise<void> {
  const up = await startUpstreamHost(BUN, { ollama: { slow: { loadMs: 0, unloadMs: 50, tokenDelayMs: 500, tokens: 10_000 } }, comfy: {}, shareGpu: [], noCallLog: ["ollama.slow"] }, join(OUT, "upstreams.log"));
  const upstream = up.urls["ollama.slow"]!;
  const runs: [string, () => Promise<ProxyProc>][] = [
    ["turnstile (LLM_BUSY_MODE=wait)", () => startTurnstileProc({ cmd: [BUN, "src/main.ts"], cwd: ROOT, ollama: { name: "up", url: upstream }, dir: OUT, logFile: join(OUT, "turnstile.log"), presetFetchLimit: true })],
    ["turnstile (LLM_BUSY_MODE=reject)", () => startTurnstileProc({ cmd: [BUN, "src/main.ts"], cwd: ROOT, ollama: { name: "up", url: upstream }, dir: OUT, logFile: join(OUT, "turnstile.log"), presetFetchLimit: true, extraEnv: { LLM_BUSY_MODE: "reject" } })],
    ["turnstile (Bun.gc every 1 s)", () => startTurnstileProc({ cmd: [BUN, join(ROOT, "bench", "experiments", "gc-entry.ts")], cwd: ROOT, ollama: { name: "up", url: upstream }, dir: OUT, logFile: join(OUT, "turnstile.log"), presetFetchLimit: true })],
    ["turnstile (bun --smol)", () => startTurnstileProc({ cmd: [BUN, "--smol", "src/main.ts"], cwd: ROOT, ollama: { name: "up", url: upstream }, dir: OUT, logFile: join(OUT, "turnstile.log"), presetFetchLimit: true })],
    ...(existsSync(BINARY)
      ? ([
          ["turnstile (compiled binary)", () => startTurnstileProc({ cmd: [BINARY], cwd: OUT, ollama: { name: "up", url: upstream }, dir: OUT, logFile: join(OUT, "turnstile.log"), presetFetchLimit: true })],
        ] as [string, () => Promise<ProxyProc>][])
      : []),
    ["variant bare", () => startVariant("bare", upstream)],
    ["variant rewrap", () => startVariant("rewrap", upstream)],
    ["variant hono", () => startVariant("hono", upstream)],
    ["variant wrapped", () => startVariant("wrapped", upstream)],
  ];
  const mib = (m?: Memory) => (m ? (m.rssKiB / 1024).toFixed(1) : "n/a");
  const lines: string[] = [];
  for (const [name, start] of runs) {
    const p = await start();
    const row = await manyStreams({ subject: "turnstile", url: p.urls.up! }, { streams: 1000, deadlineMs: 30_000, memory: () => p.memory(), note: () => {} });
    lines.push(`  ${name.padEnd(34)} first chunks ${row.gotFirstChunk}/1000  RSS idle ${mib(row.memIdle)}  open ${mib(row.memOpen)}  after ${mib(row.memAfter)} MiB  (+${((row.memOpen!.rssKiB - row.memIdle!.rssKiB) / 1000).toFixed(1)} KiB per stream)`);
    note(lines.at(-1)!);
    await p.stop();
    await Bun.sleep(500);
  }
  await up.stop();
}

/**
 * The status tracking's share of a small LLM request, and what open status pages cost: CPU per
 * non-streamed chat (each one a state change, so every reader gets events) and RSS, first with no
 * reader of /turnstile/events, then with 100.
 */
async function dashboards(): Promise<void> {
  const up = await startUpstreamHost(BUN, { ollama: { main: { loadMs: 0, unloadMs: 50, tokenDelayMs: 0, tokens: 1 } }, comfy: {}, shareGpu: [], noCallLog: ["ollama.main"] }, join(OUT, "upstreams.log"));
  const t = await startTurnstileProc({ cmd: [BUN, "src/main.ts"], cwd: ROOT, ollama: { name: "up", url: up.urls["ollama.main"]! }, dir: OUT, logFile: join(OUT, "turnstile.log"), presetFetchLimit: true });
  const url = t.urls.up!;
  const wrk = findWrk();
  const body = JSON.stringify({ model: "llama3.2", stream: false, messages: [{ role: "user", content: "hi" }] });
  const chats = async () => {
    await runLoad({ url: `${url}/api/chat`, connections: 16, seconds: 1, method: "POST", body, contentType: "application/json" }, wrk);
    const c0 = treeCpuMs(t.servingPid);
    const res = await runLoad({ url: `${url}/api/chat`, connections: 16, seconds: 4, method: "POST", body, contentType: "application/json" }, wrk);
    return { rps: res.rps, cpuUs: ((treeCpuMs(t.servingPid) - c0) * 1000) / res.requests };
  };
  const mib = (m?: Memory) => (m ? (m.rssKiB / 1024).toFixed(1) : "n/a");
  await Bun.sleep(1000);
  const idle = t.memory();
  const without = await chats();
  await Bun.sleep(1000);
  const loaded = t.memory();
  note(`no readers:   RSS idle ${mib(idle)} MiB, after the chats ${mib(loaded)} MiB; small chats ${Math.round(without.rps)} req/s, CPU ${without.cpuUs.toFixed(0)} µs/req`);
  const stop = new AbortController();
  const readers = await Promise.all(
    Array.from({ length: 100 }, async () => {
      const res = await fetch(`${url}/turnstile/events`, { signal: stop.signal });
      const reader = res.body!.getReader();
      void (async () => {
        while (!(await reader.read().catch(() => ({ done: true }))).done);
      })();
    }),
  );
  await Bun.sleep(1000);
  const open = t.memory();
  const withReaders = await chats();
  await Bun.sleep(1000);
  note(`100 readers:  RSS ${mib(open)} MiB (+${(((open?.rssKiB ?? 0) - (loaded?.rssKiB ?? 0)) / 100).toFixed(1)} KiB per reader), after the chats ${mib(t.memory())} MiB; small chats ${Math.round(withReaders.rps)} req/s, CPU ${withReaders.cpuUs.toFixed(0)} µs/req`);
  stop.abort();
  void readers;
  await t.stop();
  await up.stop();
}

async function profile(): Promise<void> {
  // Optional: another checkout (a `git archive` of an older commit) to profile instead of this one.
  const root = resolve(process.argv[3] ?? ROOT);
  const up = await startUpstreamHost(BUN, { ollama: { main: { loadMs: 0, unloadMs: 50, tokenDelayMs: 5, tokens: 20 } }, comfy: {}, shareGpu: [], noCallLog: ["ollama.main"] }, join(OUT, "upstreams.log"));
  const dir = join(OUT, "profile");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const t = await startTurnstileProc({
    cmd: [BUN, "--cpu-prof", "--cpu-prof-md", `--cpu-prof-dir=${dir}`, "--cpu-prof-interval=200", join(root, "src/main.ts")],
    cwd: root,
    ollama: { name: "up", url: up.urls["ollama.main"]! },
    dir: OUT,
    logFile: join(OUT, "turnstile-prof.log"),
    presetFetchLimit: true,
  });
  const before = threadCpuMs(t.servingPid);
  const r = await runLoad({ url: `${t.urls.up}/api/tags`, connections: 16, seconds: 8 }, findWrk());
  const after = threadCpuMs(t.servingPid);
  note(`under profile: ${Math.round(r.rps)} req/s at c=16; CPU per thread during the load (ms of ${(r.seconds * 1000).toFixed(0)}):`);
  for (const [name, ms] of after) {
    const used = ms - (before.get(name) ?? 0);
    if (used > 0) note(`  ${name.padEnd(20)} ${used.toFixed(0)} ms  (${((used / (r.seconds * 1000)) * 100).toFixed(0)} % of a core, ${((used * 1000) / r.requests).toFixed(1)} µs per request)`);
  }
  await t.stop();
  await up.stop();
  for (const f of readdirSync(dir)) note(`profile: ${join(dir, f)}`);
  const md = readdirSync(dir).find((f) => f.endsWith(".md"));
  if (md) note(readFileSync(join(dir, md), "utf8").split("\n").slice(0, 80).join("\n"));
}

/** Before/after in one run: the same load, the subjects taking turns, CPU µs per request per round. */
async function ab(): Promise<void> {
  const base = resolve(process.argv[3] ?? "");
  if (!existsSync(join(base, "src", "main.ts"))) throw new Error(`ab: ${base} holds no src/main.ts`);
  const after = resolve(process.argv[4] ?? ROOT);
  const rounds = Number(process.argv[5] ?? 5);
  const up = await startUpstreamHost(BUN, { ollama: { main: { loadMs: 0, unloadMs: 50, tokenDelayMs: 5, tokens: 20 } }, comfy: {}, shareGpu: [], noCallLog: ["ollama.main"] }, join(OUT, "upstreams.log"));
  const upstream = up.urls["ollama.main"]!;
  const subjects: [string, string, () => Promise<void>, number][] = [];
  const nginx = findNginx();
  if (nginx) {
    const ng1 = await startNginx(nginx, join(OUT, "nginx1"), [{ name: "up", upstream }], { workers: 1, keepalive: 64 });
    subjects.push(["nginx (1 worker)", ng1.urls.up!, () => ng1.stop(), ng1.pid]);
  }
  // One turnstile per upstream (runtime/card-claim.ts): "after" gets an upstream host of its own.
  const up2 = await startUpstreamHost(BUN, { ollama: { main: { loadMs: 0, unloadMs: 50, tokenDelayMs: 5, tokens: 20 } }, comfy: {}, shareGpu: [], noCallLog: ["ollama.main"] }, join(OUT, "upstreams-after.log"));
  for (const [name, dir, url] of [["before", base, upstream], ["after", after, up2.urls["ollama.main"]!]] as const) {
    const t = await startTurnstileProc({ cmd: [BUN, join(dir, "src/main.ts")], cwd: dir, ollama: { name: "up", url }, dir: OUT, logFile: join(OUT, `turnstile-${name}.log`), presetFetchLimit: false });
    subjects.push([`turnstile ${name}`, t.urls.up!, () => t.stop(), t.servingPid]);
  }
  const wrk = findWrk();
  const cpu = new Map<string, number[]>();
  const rps = new Map<string, number[]>();
  for (const [, url] of subjects) await runLoad({ url: `${url}/api/tags`, connections: 16, seconds: 2 }, wrk);
  for (let r = 0; r < rounds; r++) {
    for (const [name, url, , pid] of subjects) {
      const c0 = treeCpuMs(pid);
      const res = await runLoad({ url: `${url}/api/tags`, connections: 16, seconds: 3 }, wrk);
      cpu.set(name, [...(cpu.get(name) ?? []), ((treeCpuMs(pid) - c0) * 1000) / res.requests]);
      rps.set(name, [...(rps.get(name) ?? []), res.rps]);
    }
  }
  note(`c=16, GET /api/tags, ${rounds} rounds × 3 s, subjects taking turns`);
  for (const [name] of subjects) {
    const c = cpu.get(name)!;
    note(`  ${name.padEnd(18)} CPU median ${median(c).toFixed(1)} µs/req (${Math.min(...c).toFixed(1)}–${Math.max(...c).toFixed(1)})  ${Math.round(median(rps.get(name)!))} req/s (${rps.get(name)!.map((x) => Math.round(x)).join(", ")})`);
  }
  for (const [, , stop] of subjects) await stop();
  await up.stop();
  await up2.stop();
}

/** Issue 22's comparison with any number of turnstiles: checkouts run from source, or compiled binaries. */
async function floor(): Promise<void> {
  const argv = process.argv.slice(3);
  const ri = argv.indexOf("--rounds");
  const rounds = ri >= 0 ? Number(argv.splice(ri, 2)[1]) : 3;
  const builds = argv.length ? argv.map((a) => resolve(a)) : [ROOT];
  const up = await startMemoryUpstream(BUN, join(OUT, "memory-upstream.log"), OUT);
  const subjects: FloorSubject[] = [];
  const stops: (() => Promise<void>)[] = [up.stop];
  const bare = await startBareProxy(BUN, join(ROOT, "bench", "bare-proxy.ts"), [{ name: "up", upstream: up.url }], join(OUT, "bare.log"), OUT);
  stops.push(bare.stop);
  subjects.push({ name: "floor", url: bare.urls.up!, cpuMs: () => treeCpuMs(bare.pid) });
  for (const [i, b] of builds.entries()) {
    // `variant:NAME`: one of variant-proxy.ts's steps (e.g. `variant:pool`, the pooled hop alone).
    const variant = /\/variant:(\w+)$/.exec(b)?.[1];
    if (variant) {
      const v = await startVariant(variant, up.url);
      stops.push(v.stop);
      subjects.push({ name: variant, url: v.urls.up!, cpuMs: () => treeCpuMs(v.pid), pid: v.pid });
      continue;
    }
    const fromSource = existsSync(join(b, "src", "main.ts"));
    const t = await startTurnstileProc({ cmd: fromSource ? [BUN, join(b, "src/main.ts")] : [b], cwd: fromSource ? b : OUT, ollama: { name: "up", url: up.url }, dir: OUT, logFile: join(OUT, `turnstile-${i}.log`), presetFetchLimit: false });
    stops.push(t.stop);
    subjects.push({ name: builds.length > 1 ? `t${i}` : "turnstile", url: t.urls.up!, cpuMs: () => treeCpuMs(t.servingPid), pid: t.servingPid });
    note(`${subjects.at(-1)!.name}: ${b}`);
  }
  const nginx = findNginx();
  if (nginx) {
    const ng1 = await startNginx(nginx, join(OUT, "nginx1"), [{ name: "up", upstream: up.url }], { workers: 1, keepalive: 64 });
    stops.push(ng1.stop);
    subjects.push({ name: "nginx-1w", url: ng1.urls.up!, cpuMs: () => treeCpuMs(ng1.pid) });
  }
  const pids = new Map<string, number>([["floor", bare.pid], ...subjects.filter((s) => s.pid !== undefined).map((s) => [s.name, s.pid!] as [string, number])]);
  for (const s of subjects) await runLoad({ url: `${s.url}/api/tags`, connections: 16, seconds: 2 }, findWrk());
  const threads0 = new Map([...pids].map(([n, pid]) => [n, threadCpuMs(pid)]));
  const seconds = 4;
  const rows = await floorRounds(subjects, { connections: 16, rounds, seconds, warmupSeconds: 0, path: "/api/tags", wrk: findWrk(), note });
  // Where each Bun proxy's CPU went, by thread (fetch runs its sockets on a thread of its own).
  for (const [n, pid] of pids) {
    const before = threads0.get(n)!;
    const reqs = rows.filter((r) => r.subject === n).reduce((a, r) => a + r.rps * seconds, 0);
    const parts = [...threadCpuMs(pid)].map(([t, ms]) => [t, ((ms - (before.get(t) ?? 0)) * 1000) / reqs] as const).filter(([, us]) => us >= 0.5);
    note(`${n.padEnd(10)} CPU by thread, µs/req : ${parts.map(([t, us]) => `${t} ${us.toFixed(1)}`).join(", ")}`);
  }
  for (const s of subjects.filter((x) => x.name !== "floor")) {
    const r = ratiosByRound(rows, s.name, "floor");
    note(`${s.name.padEnd(10)} vs floor: CPU ${r.map((x) => x.cpu.toFixed(2)).join(" / ")} (median ${median(r.map((x) => x.cpu)).toFixed(2)}×), throughput ${r.map((x) => x.rps.toFixed(2)).join(" / ")} (median ${median(r.map((x) => x.rps)).toFixed(2)}×)`);
  }
  for (const stop of stops) await stop();
}

/** Start-up of compiled binaries side by side: one start of each per round, so a busy moment hits every binary alike. */
async function startupAb(): Promise<void> {
  const argv = process.argv.slice(3);
  const ri = argv.indexOf("--runs");
  const rounds = ri >= 0 ? Number(argv.splice(ri, 2)[1]) : 20;
  const bins = [...argv.map((a) => resolve(a)), buildMinimal(BUN, ROOT, OUT).path];
  const env = (port: number) => ({ ...baseEnv(OUT), NO_COLOR: "1", LOGLEVEL: "warn", AUTO_UPDATE: "false", HEALTH_INTERVAL: "1h", OLLAMA_URL: "http://127.0.0.1:9", LISTEN_OLLAMA: `127.0.0.1:${port}`, PORT: String(port) });
  const ms = new Map<string, number[]>(bins.map((b) => [b, []]));
  const cpu = new Map<string, number[]>(bins.map((b) => [b, []]));
  for (let r = 0; r < rounds; r++) {
    for (const b of bins) {
      const t = await startupTimes([b], env, 1);
      ms.get(b)!.push(...t.samples);
      cpu.get(b)!.push(...t.cpuSamples);
    }
  }
  const min = median(ms.get(bins.at(-1)!)!);
  const minCpu = median(cpu.get(bins.at(-1)!)!);
  for (const b of bins) {
    const xs = ms.get(b)!;
    const cs = cpu.get(b)!;
    note(`${b.padEnd(50)} median ${median(xs).toFixed(1)} ms (${Math.min(...xs).toFixed(1)}–${Math.max(...xs).toFixed(1)}, ${xs.length} starts)  ${(median(xs) / min).toFixed(2)}× the minimal server;  on-CPU ${median(cs).toFixed(1)} ms (${Math.min(...cs).toFixed(1)}–${Math.max(...cs).toFixed(1)})  ${(median(cs) / minCpu).toFixed(2)}×`);
  }
}

async function startup(): Promise<void> {
  // Time to import the modules `run` needs, from source, in a fresh process each.
  const script = join(OUT, "import-time.ts");
  mkdirSync(OUT, { recursive: true });
  await Bun.write(
    script,
    `const t0 = performance.now();
await import(${JSON.stringify(join(ROOT, "src/cli/index.ts"))});
const t1 = performance.now();
await import(${JSON.stringify(join(ROOT, "src/cli/serve.ts"))});
const t2 = performance.now();
console.log(JSON.stringify({ cli: t1 - t0, serve: t2 - t1, sinceStart: performance.now() }));
`,
  );
  const samples: { cli: number; serve: number; sinceStart: number }[] = [];
  for (let i = 0; i < 7; i++) {
    const r = Bun.spawnSync([BUN, script], { env: baseEnv(OUT) });
    samples.push(JSON.parse(r.stdout.toString().trim().split("\n").at(-1)!));
  }
  note(`from source: import src/cli/index.ts ${median(samples.map((s) => s.cli)).toFixed(1)} ms, then src/cli/serve.ts (config, hono, turnstile) ${median(samples.map((s) => s.serve)).toFixed(1)} ms; process clock at that point ${median(samples.map((s) => s.sinceStart)).toFixed(1)} ms`);
}

const cmd = process.argv[2] ?? "throughput";
mkdirSync(OUT, { recursive: true });
try {
  if (cmd === "throughput") await throughput();
  else if (cmd === "memory") await memory();
  else if (cmd === "profile") await profile();
  else if (cmd === "startup") await startup();
  else if (cmd === "dashboards") await dashboards();
  else if (cmd === "ab") await ab();
  else if (cmd === "floor") await floor();
  else if (cmd === "startup-ab") await startupAb();
  else note(`unknown experiment ${cmd}`);
} finally {
  await stopAll();
}
