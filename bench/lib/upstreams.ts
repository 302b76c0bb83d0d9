/** The orchestrator's side of upstream-host.ts: start it, ask it for call logs over IPC. */
import { fileURLToPath } from "node:url";
import type { CallStamp, UpstreamSpec } from "../upstream-host.ts";
import { spawnChild } from "./proc.ts";

export interface UpstreamHost {
  readonly pid: number;
  readonly urls: Record<string, string>;
  calls(name: string): Promise<CallStamp[]>;
  clear(name: string): Promise<void>;
  stop(): Promise<void>;
}

const SCRIPT = fileURLToPath(new URL("../upstream-host.ts", import.meta.url));

export async function startUpstreamHost(bun: string, spec: UpstreamSpec, logFile: string): Promise<UpstreamHost> {
  let nextId = 1;
  const pending = new Map<number, (m: Record<string, unknown>) => void>();
  let onReady!: (m: Record<string, unknown>) => void;
  const ready = new Promise<Record<string, unknown>>((r) => (onReady = r));
  const child = spawnChild({
    name: "upstreams",
    cmd: [bun, SCRIPT, JSON.stringify(spec)],
    env: { ...process.env, BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" },
    logFile,
    ipc: (raw) => {
      const m = raw as Record<string, unknown>;
      if (m.type === "ready") onReady(m);
      else if (typeof m.id === "number") {
        pending.get(m.id)?.(m);
        pending.delete(m.id);
      }
    },
  });
  // Fail fast if the host dies or hangs before it is ready; neither check outlives the start.
  let timer: ReturnType<typeof setTimeout> | undefined;
  const failed = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`upstream host not ready after 20 s; see ${logFile}`)), 20_000);
    void child.proc.exited.then((code) => reject(new Error(`upstream host exited (${code}) before it was ready; see ${logFile}`)));
  });
  failed.catch(() => {});
  let m: Record<string, unknown>;
  try {
    m = await Promise.race([ready, failed]);
  } finally {
    clearTimeout(timer);
  }
  const ask = (cmd: string, name: string) =>
    new Promise<Record<string, unknown>>((resolve) => {
      const id = nextId++;
      pending.set(id, resolve);
      child.proc.send({ id, cmd, name });
    });
  const ups = m.upstreams as Record<string, { url: string }>;
  return {
    pid: child.pid,
    urls: Object.fromEntries(Object.entries(ups).map(([k, v]) => [k, v.url])),
    calls: async (name) => (await ask("calls", name)).calls as CallStamp[],
    clear: async (name) => void (await ask("clear", name)),
    stop: () => child.stop(3000),
  };
}
