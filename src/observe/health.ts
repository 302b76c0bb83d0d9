/**
 * Probes of the enabled upstreams: once at start, then every HEALTH_INTERVAL. Failure is
 * reported, never fatal — the turnstile keeps serving (and retrying) while an upstream is down.
 */
import type { ComfyClient } from "../comfy/client.ts";
import type { OllamaClient } from "../ollama/client.ts";
import { describeFetchError } from "../upstream/upstream-errors.ts";

export type ProbeReport = (upstream: "ollama" | "comfy", up: boolean, detail: string) => void;

export async function probeOllama(c: OllamaClient, timeoutMs: number): Promise<{ up: boolean; detail: string }> {
  try {
    return { up: true, detail: await c.version(timeoutMs) };
  } catch (err) {
    return { up: false, detail: describeFetchError(err) };
  }
}

export async function probeComfy(c: ComfyClient, timeoutMs: number): Promise<{ up: boolean; detail: string }> {
  try {
    return { up: true, detail: (await c.systemStats(timeoutMs)).version };
  } catch (err) {
    return { up: false, detail: describeFetchError(err) };
  }
}

const FIRST_PROBE_DELAY_MS = 100;

export interface HealthMonitor {
  /** Resolves when the first round of probes has been reported. */
  first: Promise<void>;
  /** One round as soon as the one running ends (a request found an upstream refusing); never more than one queued. */
  probeNow(): void;
  stop(): void;
}

export function startHealthMonitor(opts: {
  ollama?: OllamaClient;
  comfy?: ComfyClient;
  timeoutMs: number;
  intervalMs: number;
  report: ProbeReport;
  /** Also part of each round while Ollama is up (the status page's resident models); its failure is ignored. */
  whenOllamaUp?: () => Promise<unknown>;
}): HealthMonitor {
  const round = async () => {
    const tasks: Promise<void>[] = [];
    if (opts.ollama) {
      tasks.push(
        probeOllama(opts.ollama, opts.timeoutMs).then(async (r) => {
          opts.report("ollama", r.up, r.detail);
          if (r.up) await opts.whenOllamaUp?.().catch(() => {});
        }),
      );
    }
    if (opts.comfy) tasks.push(probeComfy(opts.comfy, opts.timeoutMs).then((r) => opts.report("comfy", r.up, r.detail)));
    await Promise.all(tasks);
  };
  // The first round starts just after the listeners are up rather than with them: its first
  // fetch sets up Bun's HTTP client (~15 ms on the main thread), which would otherwise delay the
  // first answer a freshly started (or restarted) turnstile gives.
  let running: Promise<void> = new Promise<void>((r) => setTimeout(r, FIRST_PROBE_DELAY_MS)).then(round);
  const first = running;
  let queued = false;
  const probeNow = () => {
    if (queued) return;
    queued = true;
    running = running.then(() => {
      queued = false;
      return round();
    });
  };
  // HEALTH_INTERVAL=0: probe once at start only (and when a request finds an upstream refusing).
  if (opts.intervalMs <= 0) return { first, probeNow, stop: () => {} };
  const timer = setInterval(() => {
    running = running.then(round);
  }, opts.intervalMs);
  timer.unref();
  return { first, probeNow, stop: () => clearInterval(timer) };
}
