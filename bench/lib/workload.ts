/**
 * The pieces scenarios 7 and 8 share: a turnstile in this process in front of simulators with the
 * workload's quick poll intervals, and a streamed chat timed to its first byte. Every time is read
 * from the simulators' clock.
 */
import { buildConfig } from "../../src/config/load.ts";
import { createLogger } from "../../src/observe/log.ts";
import { now } from "../../src/sim/clock.ts";
import type { SimPair } from "../../src/sim/index.ts";
import { startTurnstile, type Turnstile } from "../../src/turnstile.ts";

/** A silent turnstile in front of `sims`; `env` adds or overrides settings. */
export function startWorkloadTurnstile(sims: SimPair, env: Record<string, string> = {}): Turnstile {
  const all = {
    LISTEN_OLLAMA: "127.0.0.1:0",
    LISTEN_COMFY: "127.0.0.1:0",
    OLLAMA_URL: sims.ollama.url,
    COMFY_URL: sims.comfy.url,
    HISTORY_POLL_INTERVAL: "50ms",
    UNLOAD_POLL_INTERVAL: "20ms",
    FREE_POLL_INTERVAL: "20ms",
    LLM_WAIT_TIMEOUT: "10m",
    HEALTH_INTERVAL: "0",
    AUTO_UPDATE: "false",
    APP_VER: "dev",
    ...env,
  };
  const { config } = buildConfig({ entries: [], file: null, env: all, platform: { os: process.platform, arch: process.arch } });
  const log = createLogger({ level: "error", format: "text", stream: { write: () => {} } });
  return startTurnstile({ config, log, version: "bench" });
}

/** One streamed chat to `ollama`: its status, the wait until its first byte, and when it ended. */
export async function timedChat(ollama: string): Promise<{ status: number; waitMs: number; end: number }> {
  const sent = now();
  const res = await fetch(`${ollama}/api/chat`, { method: "POST", body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }] }) });
  const reader = res.body!.getReader();
  const first = await reader.read();
  const waitMs = now() - sent;
  let done = first.done;
  while (!done) done = (await reader.read()).done;
  return { status: res.status, waitMs, end: now() };
}
