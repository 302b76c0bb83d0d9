/**
 * The smallest tenants that exercise the contract's generic paths (tenants/): an LLM server that
 * sleeps and wakes (vLLM's shape: /sleep, /is_sleeping, /wake_up, its own running count) and an
 * image server whose request is the job (A1111's shape: a synchronous /gen, /unload, /memory,
 * /interrupt), with a lying mode. Both record their memory in one SimGpu ledger ("ollama" stands
 * for the LLM side, "comfy" for the image side) and every call in one ordered list.
 */
import { SimGpu, type Hold } from "../../src/sim/gpu.ts";
import type { CallOptions, Holding, ImageTenant, LlmTenant, ReleaseCall, Resident, WorkClass } from "../../src/tenants/types.ts";

export interface FakeServers {
  gpu: SimGpu;
  /** Every call either fake received, in order: "llm POST /sleep", "image POST /gen", … */
  calls: string[];
  llm: FakeLlmServer;
  image: FakeImageServer;
  stop(): void;
}

export interface FakeLlmServer {
  url: string;
  /** Requests it runs that did not come through the turnstile (its own /metrics count). */
  ownRunning: number;
  /** ownRunning at each /sleep: the drain's proof. */
  sleptWithRunning: number[];
  asleep: boolean;
}

export interface FakeImageServer {
  url: string;
  /** 200 to /unload and keep the memory (Forge). */
  lie: boolean;
  /** How long a /gen takes; Infinity: until interrupted or its client goes. */
  genMs: number;
  /** Whether a /gen is running now. */
  generating: boolean;
  /** How long a /reload (the restore: the checkpoint back on the card) takes. */
  reloadMs: number;
}

export function startFakeServers(): FakeServers {
  const gpu = new SimGpu();
  const calls: string[] = [];
  let llmHold: Hold | undefined;
  let imageHold: Hold | undefined;
  let stopGen: (() => void) | undefined;
  const llmState: FakeLlmServer = { url: "", ownRunning: 0, sleptWithRunning: [], asleep: false };
  const imageState: FakeImageServer = { url: "", lie: false, genMs: 50, generating: false, reloadMs: 0 };
  let gens = 0;

  const llm = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      const path = new URL(req.url).pathname;
      calls.push(`llm ${req.method} ${path}`);
      switch (`${req.method} ${path}`) {
        case "POST /v1/chat/completions":
          if (llmState.asleep) return Response.json({ error: "model is sleeping" }, { status: 503 });
          llmHold ??= gpu.acquire("ollama", "fake-llm", 1 << 30);
          return Response.json({ choices: [{ message: { role: "assistant", content: "hi" } }] });
        case "POST /sleep":
          llmState.sleptWithRunning.push(llmState.ownRunning);
          llmState.asleep = true;
          if (llmHold) gpu.release(llmHold);
          llmHold = undefined;
          return new Response(null, { status: 200 });
        case "POST /wake_up":
          llmState.asleep = false;
          return new Response(null, { status: 200 });
        case "GET /is_sleeping":
          return Response.json({ is_sleeping: llmState.asleep });
        case "GET /metrics":
          return new Response(`running ${llmState.ownRunning}\n`);
        case "GET /version":
          return Response.json({ version: "fake-llm 1" });
        default:
          return new Response("not found", { status: 404 });
      }
    },
  });
  llmState.url = `http://127.0.0.1:${llm.port}`;

  const image = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    idleTimeout: 0,
    async fetch(req) {
      const path = new URL(req.url).pathname;
      calls.push(`image ${req.method} ${path}`);
      switch (`${req.method} ${path}`) {
        case "POST /gen": {
          imageHold ??= gpu.acquire("comfy", "fake-checkpoint", 4 << 30);
          gens++;
          imageState.generating = true;
          await new Promise<void>((resolve) => {
            const stopped = stopGen;
            // Its interrupt stops whatever runs, as A1111's does: every generation in flight.
            stopGen = () => (stopped?.(), resolve());
            if (Number.isFinite(imageState.genMs)) setTimeout(resolve, imageState.genMs);
            req.signal.addEventListener("abort", () => resolve());
          });
          calls.push("image done /gen");
          imageState.generating = --gens > 0;
          if (gens === 0) stopGen = undefined;
          return Response.json({ images: ["aGk="] });
        }
        case "POST /interrupt":
          stopGen?.();
          return Response.json({});
        case "POST /reload":
          await new Promise((r) => setTimeout(r, imageState.reloadMs));
          imageHold ??= gpu.acquire("comfy", "fake-checkpoint", 4 << 30);
          return Response.json({});
        case "POST /unload":
          if (!imageState.lie && imageHold) {
            gpu.release(imageHold);
            imageHold = undefined;
          }
          return Response.json({});
        case "GET /memory":
          return Response.json({ held: imageHold !== undefined, bytes: imageHold ? imageHold.bytes : 0, busy: imageState.generating ? 1 : 0 });
        case "GET /version":
          return Response.json({ version: "fake-image 1" });
        default:
          return new Response("not found", { status: 404 });
      }
    },
  });
  imageState.url = `http://127.0.0.1:${image.port}`;

  return {
    gpu,
    calls,
    llm: llmState,
    image: imageState,
    stop() {
      llm.stop(true);
      image.stop(true);
    },
  };
}

async function call(base: URL, method: string, path: string, o: { signal: AbortSignal }): Promise<Response> {
  return fetch(new URL(path, base), { method, signal: o.signal });
}

/** The LLM-side driver of the fake: release is /sleep, verify /is_sleeping, busy /metrics, restore /wake_up. */
export class FakeLlmTenant implements LlmTenant {
  readonly kind = "fake-llm";
  readonly side = "llm";
  readonly label = "FakeLLM";
  constructor(readonly base: URL) {}
  classify(method: string, path: string): WorkClass {
    return method === "POST" && path.startsWith("/v1/") ? "llm" : "pass";
  }
  async release(o: CallOptions): Promise<ReleaseCall> {
    const r = await call(this.base, "POST", "/sleep", o);
    return { tried: ["sleep"], accepted: r.ok };
  }
  async verify(o: CallOptions): Promise<Holding> {
    const body = (await (await call(this.base, "GET", "/is_sleeping", o)).json()) as { is_sleeping: boolean };
    return { held: !body.is_sleeping };
  }
  async resident(o: CallOptions): Promise<Resident[]> {
    return (await this.verify(o)).held ? [{ name: "fake-llm", state: "loaded" }] : [];
  }
  async probe(timeoutMs: number): Promise<string> {
    return ((await (await call(this.base, "GET", "/version", { signal: AbortSignal.timeout(timeoutMs) })).json()) as { version: string }).version;
  }
  async busy(o: CallOptions): Promise<number> {
    return Number((await (await call(this.base, "GET", "/metrics", o)).text()).split(" ")[1]);
  }
  async restore(o: CallOptions): Promise<void> {
    const r = await call(this.base, "POST", "/wake_up", o);
    if (!r.ok) throw new Error(`wake_up answered ${r.status}`);
  }
}

/** The image-side driver of the fake: POST /gen is the job; release /unload, verify /memory. */
export class FakeImageTenant implements ImageTenant {
  readonly kind = "fake-image";
  readonly side = "image";
  readonly label = "FakeImage";
  constructor(readonly base: URL) {}
  classify(method: string, path: string): WorkClass {
    if (method === "GET" && path === "/gen-ws") return "image-sync"; // a generation over a websocket (SwarmUI's GenerateText2ImageWS)
    return method === "POST" && path === "/gen" ? "image-sync" : "pass";
  }
  async release(o: CallOptions): Promise<ReleaseCall> {
    const r = await call(this.base, "POST", "/unload", o);
    return { tried: ["checkpoint"], accepted: r.ok };
  }
  async verify(o: CallOptions): Promise<Holding> {
    const m = (await (await call(this.base, "GET", "/memory", o)).json()) as { held: boolean; bytes: number };
    return { held: m.held, vramBytes: m.bytes };
  }
  async resident(o: CallOptions): Promise<Resident[]> {
    const h = await this.verify(o);
    return h.held ? [{ name: "fake-checkpoint", vramBytes: h.vramBytes }] : [];
  }
  async probe(timeoutMs: number): Promise<string> {
    return ((await (await call(this.base, "GET", "/version", { signal: AbortSignal.timeout(timeoutMs) })).json()) as { version: string }).version;
  }
  async busy(o: CallOptions): Promise<number> {
    return ((await (await call(this.base, "GET", "/memory", o)).json()) as { busy: number }).busy;
  }
  async interrupt(o: CallOptions): Promise<void> {
    await call(this.base, "POST", "/interrupt", o);
  }
  async restore(o: CallOptions): Promise<void> {
    await call(this.base, "POST", "/reload", o);
  }
}
