/**
 * The proxies under test, each started as its own process: the turnstile (from source or a
 * compiled binary) and the bare Bun proxy. nginx lives in nginx.ts.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { freePort, memoryOf, servingPid, spawnChild, treeMemory, waitHttp, type Memory } from "./lib/proc.ts";

export interface ProxyProc {
  readonly pid: number;
  /** Listener URL per upstream name (e.g. "ollama.main"). */
  readonly urls: Record<string, string>;
  /** RSS of the process that serves (after a re-exec: the child). */
  memory(): Memory | undefined;
  readonly servingPid: number;
  stop(): Promise<void>;
}

/** The turnstile's settings for the benchmark: quiet, no network beyond loopback, fast polls. */
export const TURNSTILE_BENCH_ENV: Record<string, string> = {
  LOGLEVEL: "warn",
  AUTO_UPDATE: "false",
  HEALTH_INTERVAL: "1h",
  UNLOAD_POLL_INTERVAL: "10ms",
  HISTORY_POLL_INTERVAL: "10ms",
  FREE_POLL_INTERVAL: "10ms",
  NO_COLOR: "1",
};

/** A clean environment: nothing from the caller's shell (LOGLEVEL, a stray config) leaks in. */
export function baseEnv(dir: string): Record<string, string> {
  const empty = join(dir, "empty.env");
  writeFileSync(empty, "");
  return {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: process.env.HOME ?? "/tmp",
    TMPDIR: process.env.TMPDIR ?? "/tmp",
    GPU_TURNSTILE_CONFIG: empty,
  };
}

export interface TurnstileStart {
  /** The command without arguments, e.g. [bun, "src/main.ts"] or [binary]. */
  cmd: string[];
  cwd: string;
  ollama?: { name: string; url: string };
  comfy?: { name: string; url: string };
  dir: string;
  logFile: string;
  /** Set BUN_CONFIG_MAX_HTTP_REQUESTS ourselves so the turnstile does not re-run itself. */
  presetFetchLimit: boolean;
  extraEnv?: Record<string, string>;
}

export async function startTurnstileProc(o: TurnstileStart): Promise<ProxyProc> {
  const env: Record<string, string> = { ...baseEnv(o.dir), ...TURNSTILE_BENCH_ENV, ...o.extraEnv };
  if (o.presetFetchLimit) env.BUN_CONFIG_MAX_HTTP_REQUESTS = "65535";
  const urls: Record<string, string> = {};
  if (o.ollama) {
    const port = freePort();
    env.OLLAMA_URL = o.ollama.url;
    env.LISTEN_OLLAMA = `127.0.0.1:${port}`;
    urls[o.ollama.name] = `http://127.0.0.1:${port}`;
  }
  if (o.comfy) {
    const port = freePort();
    env.COMFY_URL = o.comfy.url;
    env.LISTEN_COMFY = `127.0.0.1:${port}`;
    urls[o.comfy.name] = `http://127.0.0.1:${port}`;
  }
  const child = spawnChild({ name: "turnstile", cmd: o.cmd, cwd: o.cwd, env, logFile: o.logFile });
  for (const u of Object.values(urls)) await waitHttp(`${u}/healthz`, 15_000, "turnstile");
  const serving = servingPid(child.pid);
  return {
    pid: child.pid,
    urls,
    servingPid: serving,
    memory: () => memoryOf(serving),
    stop: () => child.stop(3000),
  };
}

export async function startBareProxy(bun: string, script: string, routes: { name: string; upstream: string }[], logFile: string, dir: string): Promise<ProxyProc> {
  const bound = routes.map((r) => ({ ...r, port: freePort() }));
  const env = { ...baseEnv(dir), BUN_CONFIG_MAX_HTTP_REQUESTS: "65535", BARE_ROUTES: JSON.stringify(bound) };
  const child = spawnChild({ name: "bare-proxy", cmd: [bun, script], env, logFile });
  const urls = Object.fromEntries(bound.map((b) => [b.name, `http://127.0.0.1:${b.port}`]));
  // Any answer will do: the bare proxy has no health route, so ask the upstream's root through it.
  for (const u of Object.values(urls)) await waitHttpAny(u, 15_000);
  return {
    pid: child.pid,
    urls,
    servingPid: child.pid,
    memory: () => treeMemory(child.pid),
    stop: () => child.stop(3000),
  };
}

async function waitHttpAny(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(1000) });
      await res.arrayBuffer();
      return;
    } catch {
      if (Date.now() > deadline) throw new Error(`bare proxy did not answer at ${url}`);
      await Bun.sleep(20);
    }
  }
}

/** bench/memory-upstream.ts: `GET /api/tags` answered from memory (scenario 8). */
export async function startMemoryUpstream(bun: string, logFile: string, dir: string): Promise<{ url: string; pid: number; stop(): Promise<void> }> {
  const port = freePort();
  const child = spawnChild({ name: "memory-upstream", cmd: [bun, join(import.meta.dir, "memory-upstream.ts")], env: { ...baseEnv(dir), PORT: String(port) }, logFile });
  const url = `http://127.0.0.1:${port}`;
  await waitHttp(`${url}/api/version`, 15_000, "memory upstream");
  return { url, pid: child.pid, stop: () => child.stop(3000) };
}
