/**
 * The upstream process: runs the simulated Ollama and ComfyUI servers the benchmark needs (the
 * project's simulators from src/sim when usable, else the stand-ins of standin.ts), apart from
 * the load generator and the proxies under test. Talks to bench/run.ts over IPC:
 *   → {type:"ready", impl, upstreams:{name:{url,port}}}
 *   ← {id, cmd:"calls", name}  → {id, calls:[{method,path,at}]}
 *   ← {id, cmd:"clear", name}  → {id}
 * The spec of upstreams to start comes as JSON in argv[2] (see UpstreamSpec).
 */
import { startComfyStandin, startOllamaStandin } from "./standin.ts";

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
  /** "sim": src/sim only; "standin": bench/standin.ts; "auto": sim when it loads, else stand-in. */
  impl: "auto" | "sim" | "standin";
  ollama: Record<string, OllamaTimings>;
  comfy: Record<string, ComfyTimings>;
  /** Pairs [ollamaName, comfyName] that share one simulated GPU. */
  shareGpu: [string, string][];
  /** Upstreams whose call log is not kept (high-volume load would grow it without bound). */
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

type SimModule = {
  startOllamaSim: (o: Record<string, unknown>) => Running | Promise<Running>;
  startComfySim: (o: Record<string, unknown>) => Running | Promise<Running>;
  SimGpu?: new () => unknown;
};

async function loadSims(impl: UpstreamSpec["impl"]): Promise<{ mod: SimModule | undefined; why: string }> {
  if (impl === "standin") return { mod: undefined, why: "stand-in requested" };
  try {
    const mod = (await import("../src/sim/index.ts" as string)) as Partial<SimModule>;
    if (typeof mod.startOllamaSim === "function" && typeof mod.startComfySim === "function") {
      return { mod: mod as SimModule, why: "src/sim" };
    }
    if (impl === "sim") throw new Error("src/sim/index.ts lacks startOllamaSim/startComfySim");
    return { mod: undefined, why: "src/sim/index.ts lacks startOllamaSim/startComfySim" };
  } catch (err) {
    if (impl === "sim") throw err;
    return { mod: undefined, why: `src/sim not usable: ${err instanceof Error ? err.message.split("\n")[0] : String(err)}` };
  }
}

async function main(): Promise<void> {
  const spec = JSON.parse(process.argv[2] ?? "{}") as UpstreamSpec;
  const { mod, why } = await loadSims(spec.impl);
  const running = new Map<string, Running>();
  const gpus = new Map<string, unknown>();
  if (mod?.SimGpu) {
    for (const [o, c] of spec.shareGpu) {
      const gpu = new mod.SimGpu();
      gpus.set(`ollama.${o}`, gpu);
      gpus.set(`comfy.${c}`, gpu);
    }
  }
  for (const [name, t] of Object.entries(spec.ollama)) {
    const key = `ollama.${name}`;
    const r = mod
      ? await mod.startOllamaSim({ ...t, gpu: gpus.get(key) })
      : startOllamaStandin(t);
    running.set(key, r);
  }
  for (const [name, t] of Object.entries(spec.comfy)) {
    const key = `comfy.${name}`;
    const r = mod
      ? await mod.startComfySim({ jobMs: t.jobMs, freeDelayMs: t.freeMs, gpu: gpus.get(key) })
      : startComfyStandin(t);
    running.set(key, r);
  }
  // The simulators keep every call (headers and bodies) for tests; under load that grows without
  // bound and would slow the upstream more and more as the run goes on.
  const trimmed = spec.noCallLog.map((n) => running.get(n)).filter((r): r is Running => r !== undefined);
  setInterval(() => {
    for (const r of trimmed) r.clearCalls();
  }, 250);

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
  process.send?.({ type: "ready", impl: mod ? "sim" : "standin", why, upstreams });
}

await main();
