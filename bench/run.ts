/**
 * gpu-turnstile's benchmark: `npx bun bench/run.ts` (or `bun run bench`) from the repository root.
 *
 * Every scenario is measured side by side in one run against a direct connection to the
 * simulated upstream, the turnstile in front of it, nginx as a plain reverse proxy and a bare
 * Bun.serve+fetch proxy (Bun's own floor). Each runs in its own process; the load comes from
 * wrk (or a Bun raw-socket generator when wrk is missing) and from this process. Loopback only,
 * every loop bounded in time. Prints a markdown table, writes the raw numbers to
 * bench/out/*.json and the table into docs/BENCHMARKS.md (between its generated-part markers).
 *
 *   --quick            shorter cells (a smoke run; does not touch docs/BENCHMARKS.md)
 *   --only 1,2,...     run only these scenarios (7, image sessions, and 9, several cards behind
 *                      HAProxy, write their own sections of docs/BENCHMARKS.md even alone: they
 *                      measure a workload, not the machine)
 *   --no-docs          leave docs/BENCHMARKS.md alone
 *   --wait-quiet N     first wait up to N seconds for other processes to leave the CPU idle
 */
import { execSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, release, totalmem, type } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { findWrk } from "./lib/load.ts";
import { cpuBusy, killAllNow, stopAll, treeCpuMs } from "./lib/proc.ts";
import { startUpstreamHost, type UpstreamHost } from "./lib/upstreams.ts";
import { findNginx, nginxVersion, startNginx, type Nginx, type NginxSettings } from "./nginx.ts";
import { renderCards, renderMarkdown, renderSessions, spliceCards, spliceDoc, spliceSessions, targets, type MachineInfo, type Results, type StartupRow } from "./report.ts";
import { download } from "./scenarios/download.ts";
import { handoff } from "./scenarios/handoff.ts";
import { manyStreams } from "./scenarios/many-streams.ts";
import { floorRounds, type FloorSubject } from "./scenarios/floor.ts";
import { passThrough } from "./scenarios/passthrough.ts";
import { buildMinimal, buildTurnstile, startupTimes } from "./scenarios/startup.ts";
import { sessions, type SessionWorkload } from "./scenarios/sessions.ts";
import { cards, type CardsWorkload } from "./scenarios/cards.ts";
import { findHaproxy } from "../src/demo/haproxy.ts";
import { streaming } from "./scenarios/streaming.ts";
import type { Target } from "./scenarios/types.ts";
import { baseEnv, startBareProxy, startMemoryUpstream, startTurnstileProc, TURNSTILE_BENCH_ENV, type ProxyProc } from "./subjects.ts";
import type { UpstreamSpec } from "./upstream-host.ts";

const ROOT = resolve(import.meta.dir, "..");
const OUT = join(ROOT, "bench", "out");
const BUN = process.execPath;
const COMMAND = "npx bun bench/run.ts";

const { values: args } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    only: { type: "string" },
    "no-docs": { type: "boolean", default: false },
    "wait-quiet": { type: "string" },
  },
});
const only = new Set((args.only ?? "1,2,3,4,5,6,7,8,9").split(",").map((s) => Number(s.trim())));
const quick = args.quick === true;

/** Durations and sizes of every scenario, in one place (also recorded in the JSON). */
const S = {
  passConcurrency: [1, 16, 128],
  passRounds: quick ? 1 : 2,
  passSeconds: quick ? 2 : 3,
  passWarmupSeconds: 1,
  streamConcurrency: [1, 16],
  streamRounds: quick ? 3 : 15,
  streamTokens: 20,
  streamTokenDelayMs: 5,
  downloadConcurrency: [1, 8],
  downloadSeconds: quick ? 2 : 3,
  manyStreams: 1000,
  manyDeadlineMs: 30_000,
  /** Status pages left open (/turnstile/events readers) during the turnstile's idle and 1,000-stream RSS. */
  dashboards: 100,
  slowTokenDelayMs: 500,
  handoffCycles: quick ? 3 : 20,
  startupRuns: quick ? 3 : 10,
  /** Scenario 8 (issue 22): rounds × seconds per subject, at one concurrency. */
  floorRounds: quick ? 1 : 3,
  floorSeconds: quick ? 2 : 4,
  floorConcurrency: 16,
  sessions: { images: 5, burstAtMs: 300, chats: 12, chatEveryMs: 500, jobMs: 1000, loadMs: 500, freeDelayMs: 100, rounds: quick ? 1 : 3 } satisfies SessionWorkload,
  cards: { images: 10, burstAtMs: 300, chats: 16, chatEveryMs: 400, jobMs: 800, loadMs: 300, freeDelayMs: 100, rounds: quick ? 1 : 3 } satisfies CardsWorkload,
};

const UPSTREAMS: UpstreamSpec = {
  ollama: {
    main: { loadMs: 0, unloadMs: 50, tokenDelayMs: S.streamTokenDelayMs, tokens: S.streamTokens },
    slow: { loadMs: 0, unloadMs: 50, tokenDelayMs: S.slowTokenDelayMs, tokens: 10_000 },
    handoff: { loadMs: 20, unloadMs: 30, tokenDelayMs: 5, tokens: 10 },
  },
  comfy: {
    main: { jobMs: 50, freeMs: 30 },
    handoff: { jobMs: 50, freeMs: 30 },
  },
  shareGpu: [["handoff", "handoff"]],
  noCallLog: ["ollama.main", "comfy.main", "ollama.slow"],
};

const NGINX_SETTINGS: NginxSettings = { workers: "auto", keepalive: 64 };
/** The second reference: one worker process, like the turnstile's one JavaScript thread (issue 14's targets are against it). */
const NGINX_1W_SETTINGS: NginxSettings = { workers: 1, keepalive: 64 };

const note = (s: string) => process.stderr.write(`${s}\n`);
const t0 = performance.now();

function sh(cmd: string): string | undefined {
  try {
    return execSync(cmd, { cwd: ROOT, stdio: ["ignore", "pipe", "ignore"] }).toString().trim();
  } catch {
    return undefined;
  }
}

function machine(upstream: string, nginx: string | undefined, wrk: string | undefined, backgroundCpuPct: number): MachineInfo {
  const wrkVersion = wrk ? /wrk (\S+)/.exec(Bun.spawnSync([wrk, "-v"]).stdout.toString())?.[1] : undefined;
  const dirty = sh("git status --porcelain")?.length ? "+local changes" : "";
  return {
    date: new Date().toISOString().slice(0, 16).replace("T", " ") + " UTC",
    cpu: cpus()[0]?.model.trim() ?? "unknown CPU",
    cores: cpus().length,
    memGiB: Math.round(totalmem() / 1024 ** 3),
    kernel: release(),
    os: type(),
    bun: Bun.version,
    nginx: nginx ? nginxVersion(nginx) : undefined,
    nginxSettings: nginx ? `worker_processes ${NGINX_SETTINGS.workers} and, as nginx-1w, ${NGINX_1W_SETTINGS.workers}; upstream keepalive ${NGINX_SETTINGS.keepalive}, proxy_buffering off` : undefined,
    wrk: wrk ? `wrk ${wrkVersion ?? ""} -t1`.replace("  ", " ") : undefined,
    upstream,
    commit: `${sh("git rev-parse --short HEAD") ?? "unknown"}${dirty}`,
    backgroundCpuPct,
  };
}

async function main(): Promise<number> {
  mkdirSync(join(OUT, "logs"), { recursive: true });
  const runDir = join(OUT, "run");
  rmSync(runDir, { recursive: true, force: true });
  mkdirSync(runDir, { recursive: true });
  const log = (name: string) => join(OUT, "logs", `${name}.log`);
  for (const f of ["upstreams", "turnstile-main", "turnstile-1k", "turnstile-handoff", "bare-main", "bare-1k"]) rmSync(log(f), { force: true });

  const wrk = findWrk();
  const nginxBin = findNginx();
  const skipped: string[] = [];
  if (!wrk) skipped.push("wrk is not installed (`apt-get install wrk`): the Bun raw-socket generator is used, which saturates earlier; compare ratios, not absolute req/s.");
  if (!nginxBin) skipped.push("nginx is not installed (`apt-get install nginx`): no nginx column, and the throughput target cannot be judged.");

  let background = (await cpuBusy(1000)) * 100;
  const quietUntil = Date.now() + Number(args["wait-quiet"] ?? 0) * 1000;
  while (background > 10 && Date.now() < quietUntil) {
    note(`waiting for a quiet machine: other processes use ${background.toFixed(0)} % of the CPU`);
    background = (await cpuBusy(2000)) * 100;
  }
  note(`gpu-turnstile bench${quick ? " (quick)" : ""}: other processes use ${background.toFixed(0)} % of the CPU${background > 10 ? " — figures will be off; rerun on a quiet machine" : ""}`);
  const up: UpstreamHost = await startUpstreamHost(BUN, UPSTREAMS, log("upstreams"));
  const upstreamDesc = "src/sim simulators";
  note(`  upstreams: ${upstreamDesc}`);
  const results: Results = { command: COMMAND, machine: machine(upstreamDesc, nginxBin, wrk, background), settings: { ...S, upstreams: UPSTREAMS, turnstileEnv: TURNSTILE_BENCH_ENV }, skipped };

  const turnstileCmd = [BUN, "src/main.ts"];
  // Scenarios 6 and 8 run the compiled binary; built once per run.
  let built: ReturnType<typeof buildTurnstile> | undefined;
  const compiled = () => (built ??= buildTurnstile(BUN, ROOT, OUT));
  const u = (name: string) => up.urls[name]!;

  // ------------------------------------------------------------ scenarios 1–3: one set of proxies
  if (only.has(1) || only.has(2) || only.has(3)) {
    const t = await startTurnstileProc({
      cmd: turnstileCmd,
      cwd: ROOT,
      ollama: { name: "ollama.main", url: u("ollama.main") },
      comfy: { name: "comfy.main", url: u("comfy.main") },
      dir: runDir,
      logFile: log("turnstile-main"),
      presetFetchLimit: false,
    });
    const routes = [
      { name: "ollama.main", upstream: u("ollama.main") },
      { name: "comfy.main", upstream: u("comfy.main") },
    ];
    const ng: Nginx | undefined = nginxBin ? await startNginx(nginxBin, join(runDir, "nginx-main"), routes, NGINX_SETTINGS) : undefined;
    const ng1: Nginx | undefined = nginxBin ? await startNginx(nginxBin, join(runDir, "nginx-1w-main"), routes, NGINX_1W_SETTINGS) : undefined;
    const bare = await startBareProxy(BUN, join(ROOT, "bench", "bare-proxy.ts"), routes, log("bare-main"), runDir);
    const targetsFor = (name: string): Target[] => [
      { subject: "direct", url: u(name) },
      { subject: "turnstile", url: t.urls[name]!, cpuMs: () => treeCpuMs(t.servingPid) },
      ...(ng ? [{ subject: "nginx" as const, url: ng.urls[name]!, cpuMs: () => treeCpuMs(ng.pid) }] : []),
      ...(ng1 ? [{ subject: "nginx-1w" as const, url: ng1.urls[name]!, cpuMs: () => treeCpuMs(ng1.pid) }] : []),
      { subject: "bun-bare", url: bare.urls[name]!, cpuMs: () => treeCpuMs(bare.pid) },
    ];
    try {
      if (only.has(1)) {
        note(`1. small JSON pass-through (GET /api/tags, best of ${S.passRounds} × ${S.passSeconds} s per cell)`);
        results.passThrough = await passThrough(targetsFor("ollama.main"), {
          concurrency: S.passConcurrency,
          rounds: S.passRounds,
          seconds: S.passSeconds,
          warmupSeconds: S.passWarmupSeconds,
          path: "/api/tags",
          wrk,
          note,
        });
      }
      if (only.has(2)) {
        note(`2. streaming (/api/chat, ${S.streamTokens} tokens every ${S.streamTokenDelayMs} ms)`);
        // One stream each first: the model loads, connections open.
        await streaming(targetsFor("ollama.main"), { concurrency: [1], rounds: 1, tokens: 2, note: () => {} });
        results.streaming = await streaming(targetsFor("ollama.main"), { concurrency: S.streamConcurrency, rounds: S.streamRounds, tokens: S.streamTokens, note });
      }
      if (only.has(3)) {
        note(`3. 8 MiB download (/view?filename=big.png, ${S.downloadSeconds} s per cell)`);
        results.download = await download(targetsFor("comfy.main"), {
          concurrency: S.downloadConcurrency,
          seconds: S.downloadSeconds,
          path: "/view?filename=big.png&type=output",
          wrk,
          note,
        });
      }
    } finally {
      await Promise.all([t.stop(), ng?.stop(), ng1?.stop(), bare.stop()]);
    }
  }

  // ------------------------------------------------------------ scenario 4: fresh proxies, one at a time
  if (only.has(4)) {
    note(`4. ${S.manyStreams} concurrent open streams (one token every ${S.slowTokenDelayMs} ms)`);
    const route = [{ name: "ollama.slow", upstream: u("ollama.slow") }];
    const rows = [];
    rows.push(await manyStreams({ subject: "direct", url: u("ollama.slow") }, { streams: S.manyStreams, deadlineMs: S.manyDeadlineMs, note }));
    await Bun.sleep(1000);
    const starters: [Target["subject"], () => Promise<ProxyProc | Nginx>][] = [
      [
        "turnstile",
        () =>
          startTurnstileProc({
            cmd: turnstileCmd,
            cwd: ROOT,
            ollama: { name: "ollama.slow", url: u("ollama.slow") },
            dir: runDir,
            logFile: log("turnstile-1k"),
            presetFetchLimit: false,
          }),
      ],
      ...(nginxBin ? [["nginx", () => startNginx(nginxBin, join(runDir, "nginx-1k"), route, NGINX_SETTINGS)] as [Target["subject"], () => Promise<Nginx>]] : []),
      ["bun-bare", () => startBareProxy(BUN, join(ROOT, "bench", "bare-proxy.ts"), route, log("bare-1k"), runDir)],
    ];
    for (const [subject, start] of starters) {
      const p = await start();
      try {
        const dashboards = subject === "turnstile" ? S.dashboards : 0;
        rows.push(await manyStreams({ subject, url: p.urls["ollama.slow"]! }, { streams: S.manyStreams, deadlineMs: S.manyDeadlineMs, memory: () => p.memory(), note, dashboards }));
      } finally {
        await p.stop();
      }
      await Bun.sleep(1000);
    }
    results.manyStreams = rows;
  }

  // ------------------------------------------------------------ scenario 5: hand-off
  if (only.has(5)) {
    note(`5. lock hand-off (${S.handoffCycles} cycles)`);
    const t = await startTurnstileProc({
      cmd: turnstileCmd,
      cwd: ROOT,
      ollama: { name: "ollama.handoff", url: u("ollama.handoff") },
      comfy: { name: "comfy.handoff", url: u("comfy.handoff") },
      dir: runDir,
      logFile: log("turnstile-handoff"),
      presetFetchLimit: false,
    });
    try {
      results.handoff = await handoff({
        ollamaUrl: t.urls["ollama.handoff"]!,
        comfyUrl: t.urls["comfy.handoff"]!,
        ollamaName: "ollama.handoff",
        comfyName: "comfy.handoff",
        calls: (n) => up.calls(n),
        clear: (n) => up.clear(n),
        cycles: S.handoffCycles,
        note,
      });
    } finally {
      await t.stop();
    }
  }

  // ------------------------------------------------------------ scenario 6: compiled start-up
  if (only.has(6)) {
    note(`6. compiled binary start → first /healthz (${S.startupRuns} runs each)`);
    const rows: StartupRow[] = [];
    const envFor = (port: number, preset: boolean): Record<string, string> => ({
      ...baseEnv(runDir),
      ...TURNSTILE_BENCH_ENV,
      OLLAMA_URL: u("ollama.main"),
      LISTEN_OLLAMA: `127.0.0.1:${port}`,
      ...(preset ? { BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" } : {}),
    });
    try {
      const built = compiled();
      note(`  built ${built.path} with \`${built.command}\` in ${(built.buildMs / 1000).toFixed(1)} s`);
      results.settings.turnstileBuild = built.command;
      const plain = await startupTimes([built.path], (p) => envFor(p, false), S.startupRuns);
      rows.push({ binary: "gpu-turnstile", how: "as a user starts it (http upstream: one process, no re-run)", ms: plain.samples.length ? plain.ms : undefined, failures: plain.failures });
      const preset = await startupTimes([built.path], (p) => envFor(p, true), S.startupRuns);
      rows.push({ binary: "gpu-turnstile", how: "BUN_CONFIG_MAX_HTTP_REQUESTS preset (systemd unit, container)", ms: preset.samples.length ? preset.ms : undefined, failures: preset.failures });
    } catch (err) {
      rows.push({ binary: "gpu-turnstile", how: "as a user starts it", failures: 1, error: err instanceof Error ? err.message.split("\n")[0] : String(err) });
    }
    try {
      const min = buildMinimal(BUN, ROOT, OUT);
      const r = await startupTimes([min.path], (p) => ({ ...baseEnv(runDir), PORT: String(p) }), S.startupRuns);
      rows.push({ binary: "minimal Bun.serve (reference)", how: "`--compile --bytecode`", ms: r.samples.length ? r.ms : undefined, failures: r.failures });
    } catch (err) {
      rows.push({ binary: "minimal Bun.serve (reference)", how: "`--compile --bytecode`", failures: 1, error: err instanceof Error ? err.message.split("\n")[0] : String(err) });
    }
    for (const r of rows) note(`  ${r.binary}, ${r.how}: ${r.ms ? `median ${r.ms.p50.toFixed(1)} ms (min ${r.ms.min.toFixed(1)}, max ${r.ms.max.toFixed(1)})` : (r.error ?? "failed")}`);
    results.startup = rows;
  }

  // ------------------------------------------------------------ scenario 8: the floor of a Bun proxy
  if (only.has(8)) {
    note(`8. the floor of a Bun proxy: GET /api/tags answered from memory, c=${S.floorConcurrency}, ${S.floorRounds} rounds × ${S.floorSeconds} s, taking turns`);
    const mem = await startMemoryUpstream(BUN, log("memory-upstream"), runDir);
    const route = [{ name: "mem", upstream: mem.url }];
    const stops: (() => Promise<void>)[] = [mem.stop];
    try {
      const b = compiled();
      const t = await startTurnstileProc({ cmd: [b.path], cwd: runDir, ollama: { name: "mem", url: mem.url }, dir: runDir, logFile: log("turnstile-floor"), presetFetchLimit: false });
      stops.push(t.stop);
      const bare = await startBareProxy(BUN, join(ROOT, "bench", "bare-proxy.ts"), route, log("bare-floor"), runDir);
      stops.push(bare.stop);
      const subjects: FloorSubject[] = [
        { name: "turnstile", url: t.urls.mem!, cpuMs: () => treeCpuMs(t.servingPid) },
        { name: "floor", url: bare.urls.mem!, cpuMs: () => treeCpuMs(bare.pid) },
      ];
      if (nginxBin) {
        const ng1 = await startNginx(nginxBin, join(runDir, "nginx-1w-floor"), route, NGINX_1W_SETTINGS);
        stops.push(ng1.stop);
        subjects.push({ name: "nginx-1w", url: ng1.urls.mem!, cpuMs: () => treeCpuMs(ng1.pid) });
      }
      results.floor = await floorRounds(subjects, { connections: S.floorConcurrency, rounds: S.floorRounds, seconds: S.floorSeconds, warmupSeconds: 2, path: "/api/tags", wrk, note });
    } finally {
      for (const stop of stops.reverse()) await stop();
    }
  }

  // ------------------------------------------------------------ scenario 7: image sessions
  if (only.has(7)) {
    note(`7. image sessions: a burst of ${S.sessions.images} image jobs among ${S.sessions.chats} chats, IMAGE_SESSION_MAX=0 vs the default`);
    results.sessions = { workload: S.sessions, rows: await sessions(S.sessions, note) };
  }

  // ------------------------------------------------------------ scenario 9: several cards
  if (only.has(9)) {
    note(`9. several cards: ${S.cards.images} image jobs among ${S.cards.chats} chats, one card vs two behind HAProxy (deploy/haproxy.cfg)`);
    const haproxy = findHaproxy();
    const rows = haproxy && (await cards(S.cards, note));
    if (haproxy && rows) results.cards = { workload: S.cards, haproxy: haproxy.version.replace(/ - https?:.*$/, "").replace(/ \d{4}\/\d\d\/\d\d$/, ""), rows };
    else note("  skipped: haproxy is not installed (Debian package haproxy)");
  }

  await up.stop();
  results.durationS = (performance.now() - t0) / 1000;

  const md = renderMarkdown(results);
  const sessionsMd = results.sessions && renderSessions(results.sessions, results.machine.date, results.machine.commit);
  const cardsMd = results.cards && renderCards(results.cards, results.machine.date, results.machine.commit);
  process.stdout.write(`\n${md}\n${sessionsMd ? `\n${sessionsMd}\n` : ""}${cardsMd ? `\n${cardsMd}\n` : ""}`);
  const stamp = new Date().toISOString().replace(/[:.]/g, "-");
  const json = JSON.stringify({ ...results, targets: targets(results) }, null, 2);
  writeFileSync(join(OUT, `bench-${stamp}.json`), json);
  writeFileSync(join(OUT, "latest.json"), json);
  writeFileSync(join(OUT, "latest.md"), md);
  note(`raw numbers: bench/out/bench-${stamp}.json (and latest.json)`);
  const fullRun = !quick && [1, 2, 3, 4, 5, 6].every((n) => only.has(n));
  const doc = join(ROOT, "docs", "BENCHMARKS.md");
  if (!args["no-docs"] && fullRun) {
    mkdirSync(join(ROOT, "docs"), { recursive: true });
    writeFileSync(doc, spliceDoc(existsSync(doc) ? readFileSync(doc, "utf8") : undefined, md));
    note("table written to docs/BENCHMARKS.md");
  } else if (!args["no-docs"]) {
    note("partial or quick run: the main tables of docs/BENCHMARKS.md left alone");
  }
  if (!args["no-docs"] && !quick && sessionsMd && existsSync(doc)) {
    writeFileSync(doc, spliceSessions(readFileSync(doc, "utf8"), sessionsMd));
    note("scenario 7 written to docs/BENCHMARKS.md");
  }
  if (!args["no-docs"] && !quick && cardsMd && existsSync(doc)) {
    writeFileSync(doc, spliceCards(readFileSync(doc, "utf8"), cardsMd));
    note("scenario 9 written to docs/BENCHMARKS.md");
  }
  note(`done in ${results.durationS.toFixed(0)} s`);
  return 0;
}

let interrupted = false;
for (const sig of ["SIGINT", "SIGTERM"] as const) {
  process.on(sig, () => {
    if (interrupted) return;
    interrupted = true;
    note(`\n${sig}: stopping the benchmark's processes`);
    void stopAll().finally(() => process.exit(130));
  });
}

try {
  process.exitCode = await main();
} catch (err) {
  note(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  process.exitCode = 1;
} finally {
  await stopAll();
  killAllNow();
}
// Everything is written; a stray socket or timer must not keep the command from returning.
process.exit(process.exitCode ?? 0);
