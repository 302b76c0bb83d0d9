/**
 * Start a real turnstile (real sockets) for end-to-end tests, with fast test timings and a
 * captured log. Every helper here waits on events or polls with a deadline — never a bare sleep.
 */
import { readdirSync, readFileSync } from "node:fs";
import { buildConfig } from "../../src/config/load.ts";
import type { Config } from "../../src/config/types.ts";
import { createLogger, type RootLogger } from "../../src/observe/log.ts";
import { startTurnstile, type Turnstile, type TurnstileOptions } from "../../src/turnstile.ts";

/** Fast timings so a whole image job takes tens of milliseconds. Override per test. */
export const FAST: Record<string, string> = {
  LISTEN_OLLAMA: "127.0.0.1:0",
  LISTEN_COMFY: "127.0.0.1:0",
  UNLOAD_TIMEOUT: "2s",
  UNLOAD_POLL_INTERVAL: "10ms",
  HISTORY_POLL_INTERVAL: "10ms",
  FREE_POLL_INTERVAL: "10ms",
  FREE_TIMEOUT: "2s",
  JOB_TIMEOUT: "5s",
  LLM_WAIT_TIMEOUT: "5s",
  PROBE_TIMEOUT: "1s",
  HEALTH_INTERVAL: "1h",
  BACKOFF_INITIAL: "20ms",
  BACKOFF_MAX: "160ms",
  SHUTDOWN_TIMEOUT: "2s",
  WARM_TIMEOUT: "2s",
  AUTO_UPDATE: "false",
  APP_VER: "dev",
  LOGLEVEL: "debug",
};

export function testConfig(env: Record<string, string>): Config {
  return buildConfig({ entries: [], file: null, env: { ...FAST, ...env }, platform: { os: "linux", arch: "x64" } }).config;
}

export interface TestTurnstile extends Turnstile {
  config: Config;
  ollamaUrl: string;
  comfyUrl: string;
  logLines: string[];
  /** Resolves once background image jobs and warm-ups have finished and the lock is idle. */
  settled(): Promise<void>;
  close(): Promise<void>;
}

/** `more`: further start options (a fake tenant's drivers). */
export function startTestTurnstile(env: Record<string, string>, more: Partial<TurnstileOptions> = {}): TestTurnstile {
  const config = testConfig(env);
  const logLines: string[] = [];
  const log: RootLogger = createLogger({
    level: config.logLevel,
    format: config.logFormat,
    stream: { write: (line: string) => logLines.push(line) },
  });
  const t = startTurnstile({ ...more, config, log, version: "v0.0.0-test" });
  return Object.assign(t, {
    config,
    logLines,
    ollamaUrl: t.listener("ollama")?.url ?? "",
    comfyUrl: t.listener("comfy")?.url ?? "",
    async settled() {
      await t.tracker.settled();
      await until(() => t.lock.state === "idle", "lock back to idle");
    },
    async close() {
      await t.stop(500);
      log.close();
    },
  });
}

/** Poll `cond` until true or the deadline; fails with what was awaited. */
export async function until(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** How many children a process has, from /proc (every thread's list: Bun may spawn from any). Linux only. */
export function childCount(pid: number): number {
  let n = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    n += readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).length;
  }
  return n;
}
