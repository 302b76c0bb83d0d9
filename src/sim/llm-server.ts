/**
 * The listener the four LLM simulators share: a loopback Bun server with the call record, failure
 * injection and a stop that frees the GPU, around one engine and one route function.
 */
import { SimGpu } from "./gpu.ts";
import { baseUrl, CallLog, loopbackOnly, type OverrideHandler, type RecordedCall, readBody } from "./http.ts";
import { DEFAULT_LLM_MODELS, json, LlmEngine, type LlmModelSpec, type LyingModes } from "./llm-engine.ts";
import { Timers } from "./timers.ts";

export interface LlmSimOptions extends LyingModes {
  /** Shared GPU; the simulator makes its own when absent. */
  gpu?: SimGpu;
  models?: LlmModelSpec[];
  /** Time from a load's start to the model answering (default 200). */
  loadMs?: number;
  /** Time from a release to the memory being back and the model gone from the listing (default 100). */
  unloadMs?: number;
  /** Delay before each streamed token (default 15). */
  tokenDelayMs?: number;
  /** Tokens per answer (default 9). */
  tokens?: number;
  /** Keep `calls` (default true). */
  recordCalls?: boolean;
  /** Listen address; loopback only (default 127.0.0.1). */
  hostname?: string;
  /** Listen port (default 0: any free port). */
  port?: number;
}

export interface LlmSim {
  readonly url: string;
  readonly port: number;
  readonly gpu: SimGpu;
  readonly calls: RecordedCall[];
  /** Instance ids holding memory (loading, loaded or still unloading). */
  resident(): string[];
  /** Requests in flight. */
  inflight(): number;
  /** Loads started so far. */
  loads(): number;
  /** Switches the lying modes at run time. */
  setLying(modes: LyingModes): void;
  /** Changes how fast the next answers come (a test makes one stream long, not the chat before it). */
  setTiming(t: Partial<Pick<LlmEngine["timing"], "tokenDelayMs" | "tokens">>): void;
  override(method: string, path: string, handler: OverrideHandler): () => void;
  clearCalls(): void;
  stop(): Promise<void>;
}

export interface RouteCtx {
  req: Request;
  url: URL;
  body: Uint8Array;
  engine: LlmEngine;
}

export type Router = (ctx: RouteCtx) => Response | Promise<Response>;

/** Starts `router` on loopback around a fresh engine; `setup` runs once the engine exists. */
export async function serveLlmSim(
  server: string,
  opts: LlmSimOptions,
  makeRouter: (engine: LlmEngine) => Router,
): Promise<LlmSim & { engine: LlmEngine }> {
  const hostname = loopbackOnly(opts.hostname);
  const gpu = opts.gpu ?? new SimGpu();
  const timers = new Timers();
  const log = new CallLog(opts.recordCalls ?? true);
  const lying: LyingModes = { releaseFreesNothing: opts.releaseFreesNothing, refuseWhileBusy: opts.refuseWhileBusy };
  const engine = new LlmEngine(
    server,
    gpu,
    timers,
    { loadMs: opts.loadMs ?? 200, unloadMs: opts.unloadMs ?? 100, tokenDelayMs: opts.tokenDelayMs ?? 15, tokens: opts.tokens ?? 9 },
    opts.models ?? DEFAULT_LLM_MODELS,
    lying,
  );
  const router = makeRouter(engine);
  const bun = Bun.serve({
    hostname,
    port: opts.port ?? 0,
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url);
      const body = await readBody(req);
      log.record(req, url, body);
      const injected = await log.runOverrides(req, url, body);
      if (injected) return injected;
      return router({ req, url, body, engine });
    },
    error: (err) => json(500, { error: { code: 500, message: String(err), type: "server_error" } }),
  });
  const port = bun.port as number;
  let stopped: Promise<void> | undefined;
  return {
    url: baseUrl(hostname, port),
    port,
    gpu,
    engine,
    calls: log.calls,
    resident: () => [...engine.instances.keys()],
    inflight: () => engine.inflight(),
    loads: () => engine.loadCount,
    setTiming(t) {
      Object.assign(engine.timing, t);
    },
    setLying(modes) {
      Object.assign(lying, modes);
    },
    override: (method, path, handler) => log.override(method, path, handler),
    clearCalls: () => log.clear(),
    stop() {
      stopped ??= (async () => {
        timers.stopAll();
        await bun.stop(true);
        engine.shutdown();
      })();
      return stopped;
    },
  };
}
