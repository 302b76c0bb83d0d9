/**
 * llama.cpp's `llama-server` in router mode as an LLM-side tenant (tenants.md). Its traps:
 * - No unload-all: release lists `/models` and unloads each model that is `loaded`, `loading` or
 *   `downloading` (an unload cancels a download, which would otherwise load when done); verify
 *   reads `/models` again: every `status.value` must be `unloaded` or `sleeping`.
 * - Autoload (on by default) loads a model on ANY request that names it, GET ones through
 *   `?model=` included: so every POST but the unload, and the GET routes that take `?model=`
 *   (`/props`, `/slots`, `/metrics`), are LLM work and wait at the turnstile during an image turn.
 * - `--fit` (on by default) squeezes a model into what is free, silently: after a hand-off the
 *   model's context (`/props` `n_ctx`) is compared with the `--ctx-size` it was started with
 *   (`/models` `status.args`), and a smaller one is reported like Ollama's partial offload.
 */
import { isRecord } from "../upstream/http.ts";
import { describeFetchError } from "../upstream/upstream-errors.ts";
import { holdingFrom, listOf, releaseEach, tenantJson } from "./llm-http.ts";
import type { CallOptions, Holding, LlmTenant, ReleaseCall, Resident, TenantContext, TenantDriver, WorkClass } from "./types.ts";

/** Statuses that hold (or are about to hold) memory. */
const HOLDING = new Set(["loaded", "loading", "downloading"]);
/** GET routes that route on `?model=` and so may autoload one. */
const MODEL_GETS = new Set(["/props", "/slots", "/metrics"]);

export interface RouterModel {
  id: string;
  status: string;
  args: string[];
}

/** `/models` as a list of ids, statuses and start arguments; an error when it is not that shape. */
export function routerModels(v: unknown): RouterModel[] {
  return listOf(v, "data", "/models").map((m) => {
    const st = isRecord(m.status) ? m.status : {};
    return {
      id: String(m.id ?? ""),
      status: typeof st.value === "string" ? st.value : "unknown",
      args: Array.isArray(st.args) ? st.args.map(String) : [],
    };
  });
}

/** The context a model was asked to load with (`--ctx-size N` / `-c N` in its arguments). */
export function askedContext(args: readonly string[]): number | undefined {
  for (let i = 0; i < args.length - 1; i++) {
    if (args[i] === "--ctx-size" || args[i] === "-c") {
      const n = Number(args[i + 1]);
      return Number.isInteger(n) && n > 0 ? n : undefined;
    }
  }
  return undefined;
}

/** `qwen loaded with 12% of its context (4096 of 32768 tokens): --fit squeezed it …`, the way partial offload is reported. */
export function fitWarning(id: string, nCtx: number, asked: number): string {
  const pct = Math.floor((nCtx / asked) * 100);
  return (
    `${id} loaded with ${pct}% of its context (${nCtx} of ${asked} tokens): llama-server's --fit squeezed it into the VRAM ` +
    "that was free, so something still held VRAM at the hand-off; it stays squeezed until unloaded"
  );
}

export class LlamaServerTenant implements LlmTenant {
  readonly kind = "llama-server";
  readonly side = "llm";
  readonly label = "llama-server";

  constructor(
    readonly base: URL,
    private readonly local: boolean,
  ) {}

  classify(method: string, path: string): WorkClass {
    if (method === "POST") return path === "/models/unload" ? "pass" : "llm";
    return MODEL_GETS.has(path) ? "llm" : "pass";
  }

  private async models(signal: AbortSignal): Promise<RouterModel[]> {
    return routerModels(await tenantJson(this.base, "/models", { signal }));
  }

  async release({ signal }: CallOptions): Promise<ReleaseCall> {
    let held: string[];
    try {
      held = (await this.models(signal)).filter((m) => HOLDING.has(m.status)).map((m) => m.id);
    } catch (err) {
      if (signal.aborted) throw err;
      return { tried: [], accepted: false, error: `/models: ${describeFetchError(err)}` };
    }
    const r = await releaseEach(held, signal, async (model) => {
      const v = await tenantJson(this.base, "/models/unload", { signal, body: { model } });
      return isRecord(v) && v.success === true;
    });
    return { tried: held, ...r };
  }

  verify({ signal }: CallOptions): Promise<Holding> {
    return holdingFrom(() => this.resident({ signal }), "/models", this.local, signal);
  }

  async resident({ signal }: CallOptions): Promise<Resident[]> {
    return (await this.models(signal))
      .filter((m) => m.status !== "unloaded" && m.status !== "sleeping")
      .map((m) => ({ name: m.id, state: m.status }));
  }

  async probe(timeoutMs: number): Promise<string> {
    const signal = AbortSignal.timeout(timeoutMs);
    const v = await tenantJson(this.base, "/health", { signal });
    return isRecord(v) && typeof v.status === "string" ? v.status : "ok";
  }

  /**
   * After a hand-off back to the LLM side: each loaded model whose context is smaller than it was
   * started with was squeezed by `--fit`. `?autoload=false`, so the reading loads nothing.
   */
  async afterLoad({ signal }: CallOptions): Promise<string[]> {
    const out: string[] = [];
    for (const m of await this.models(signal)) {
      const asked = askedContext(m.args);
      if (m.status !== "loaded" || asked === undefined) continue;
      const props = await tenantJson(this.base, `/props?model=${encodeURIComponent(m.id)}&autoload=false`, { signal });
      const dgs = isRecord(props) && isRecord(props.default_generation_settings) ? props.default_generation_settings : {};
      const nCtx = typeof dgs.n_ctx === "number" ? dgs.n_ctx : undefined;
      if (nCtx !== undefined && nCtx < asked) out.push(fitWarning(m.id, nCtx, asked));
    }
    return out;
  }
}

export const llamaServerDriver: TenantDriver<LlamaServerTenant> = {
  kind: "llama-server",
  label: "llama-server",
  create: (ctx: TenantContext) => new LlamaServerTenant(ctx.base, ctx.local),
};
