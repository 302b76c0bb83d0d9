/**
 * The upstream process: runs the project's simulated Ollama and ComfyUI servers (src/sim, the
 * same ones the tests and the demo use) apart from the load generator and the proxies under
 * test. Talks to bench/run.ts over IPC:
 *   → {type:"ready", upstreams:{name:{url,port}}}
 *   ← {id, cmd:"calls", name}  → {id, calls:[{method,path,at}]}
 *   ← {id, cmd:"clear", name}  → {id}
 * The spec of upstreams to start comes as JSON in argv[2] (see UpstreamSpec).
 */
import { SimGpu, startComfySim, startOllamaSim } from "../src/sim/index.ts";

export interface OllamaTimings {
  loadMs: number;
  unloadMs: number;
  tokenDelayMs: number;
  tokens: number;
}

export interface ComfyTimings {
  jobMs: number;
  freeMs: number;
}

export interface UpstreamSpec {
  ollama: Record<string, OllamaTimings>;
  comfy: Record<string, ComfyTimings>;
  /** Pairs [ollamaName, comfyName] that share one simulated GPU. */
  shareGpu: [string, string][];
  /** Upstreams that keep no call log: under load it would grow without bound and slow them down. */
  noCallLog: string[];
}

export interface CallStamp {
  method: string;
  path: string;
  at: number;
}

interface Running {
  url: string;
  port: number;
  calls: CallStamp[];
  clearCalls(): void;
  stop(): Promise<void>;
}

async function main(): Promise<void> {
  const spec = JSON.parse(process.argv[2] ?? "{}") as UpstreamSpec;
  const running = new Map<string, Running>();
  const gpus = new Map<string, SimGpu>();
  for (const [o, c] of spec.shareGpu) {
    const gpu = new SimGpu();
    gpus.set(`ollama.${o}`, gpu);
    gpus.set(`comfy.${c}`, gpu);
  }
  const recordCalls = (key: string) => !spec.noCallLog.includes(key);
  for (const [name, t] of Object.entries(spec.ollama)) {
    const key = `ollama.${name}`;
    running.set(key, await startOllamaSim({ ...t, gpu: gpus.get(key), recordCalls: recordCalls(key) }));
  }
  for (const [name, t] of Object.entries(spec.comfy)) {
    const key = `comfy.${name}`;
    running.set(key, await startComfySim({ jobMs: t.jobMs, freeDelayMs: t.freeMs, gpu: gpus.get(key), recordCalls: recordCalls(key) }));
  }

  process.on("message", (raw: unknown) => {
    const m = raw as { id: number; cmd: string; name: string };
    const r = running.get(m.name);
    if (m.cmd === "calls") {
      const calls = (r?.calls ?? []).map((c) => ({ method: c.method, path: c.path, at: c.at }));
      process.send?.({ id: m.id, calls });
    } else if (m.cmd === "clear") {
      r?.clearCalls();
      process.send?.({ id: m.id });
    }
  });
  const stop = async () => {
    await Promise.all([...running.values()].map((r) => r.stop().catch(() => {})));
    process.exit(0);
  };
  process.on("SIGTERM", () => void stop());
  process.on("SIGINT", () => void stop());
  const upstreams = Object.fromEntries([...running].map(([k, r]) => [k, { url: r.url, port: r.port }]));
  process.send?.({ type: "ready", upstreams });
}

await main();
