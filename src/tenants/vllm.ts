/**
 * vLLM with sleep mode as an LLM-side tenant (tenants.md). Its traps:
 * - `/sleep` in its default mode ABORTS requests in flight: `busy` reads `/metrics`
 *   (`vllm:num_requests_running` + `vllm:num_requests_waiting`) so the hand-over drains first, and
 *   release itself will not send `/sleep` while that count is above 0 (the hand-over then waits,
 *   within its bound, and fails closed rather than cut someone's answer).
 * - `/sleep?level=1` (weights to CPU RAM, so `/wake_up` alone brings them back); verify reads
 *   `GET /is_sleeping`, never the 200 of `/sleep`.
 * - `restore` sends `/wake_up` before the first LLM request after an image turn; `/wake_up` (and
 *   `/collective_rpc`, which reloads weights) load the model, so they are LLM work like every other
 *   POST but `/sleep`.
 * - A client's own `/sleep` through the LLM listener is refused (409, `refuse`): it would abort the
 *   requests in flight, and vLLM would sleep until the next image turn, every chat meanwhile failing.
 *   A client's `/wake_up` is LLM work as above and harmless. (A client's unload on the other LLM
 *   kinds passes, as Ollama's keep_alive:0 does: it leaves what the turnstile's own release leaves,
 *   and the next request loads the model again.)
 * Needs `VLLM_SERVER_DEV_MODE=1 vllm serve … --enable-sleep-mode`: without it `/is_sleeping` is a
 * 404, and verify says so.
 */
import { UpstreamHttpError } from "../upstream/http.ts";
import { holdingFrom, releaseEach, tenantCall, tenantJson } from "./llm-http.ts";
import type { ErrorReply } from "../http/dialect.ts";
import type { CallOptions, Holding, LlmTenant, ReleaseCall, Resident, TenantContext, TenantDriver, WorkClass } from "./types.ts";
import { describeFetchError } from "../upstream/upstream-errors.ts";

/** What a client is told for its own /sleep (any level or tags): the turnstile does it, at the right time. */
const SLEEP_REFUSED: ErrorReply = {
  status: 409,
  type: "managed_by_turnstile",
  message:
    "gpu-turnstile: vLLM's sleep and wake are managed by the turnstile (LLM_KIND=vllm): it drains vLLM's requests and puts it to sleep before each image turn, and wakes it for the next LLM request. " +
    "A client's /sleep would abort the requests in flight and leave every chat failing until the next image turn. " +
    "To have the card for a program of your own, take a GPU lease (gpu-turnstile lease -- <command>).",
};

const NOT_ENABLED = "vLLM's sleep mode is not enabled (start it with VLLM_SERVER_DEV_MODE=1 and --enable-sleep-mode)";

/** Requests running plus waiting, summed over every engine and model line of `/metrics`. */
export function requestsInFlight(metrics: string): number {
  let n = 0;
  for (const line of metrics.split("\n")) {
    const m = /^vllm:num_requests_(?:running|waiting)(?:\{[^}]*\})?\s+([0-9.eE+-]+)/.exec(line);
    if (m) n += Number(m[1]);
  }
  return n;
}

export class VllmTenant implements LlmTenant {
  readonly kind = "vllm";
  readonly side = "llm";
  readonly label = "vLLM";

  constructor(
    readonly base: URL,
    private readonly local: boolean,
  ) {}

  classify(method: string, path: string): WorkClass {
    return method === "POST" && path !== "/sleep" ? "llm" : "pass";
  }

  refuse(method: string, path: string): ErrorReply | undefined {
    // FastAPI redirects /sleep/ to /sleep: both are the same call.
    return method === "POST" && (path === "/sleep" || path === "/sleep/") ? SLEEP_REFUSED : undefined;
  }

  async busy({ signal }: CallOptions): Promise<number> {
    const { status, text } = await tenantCall(this.base, "/metrics", { signal });
    if (status !== 200) throw new UpstreamHttpError(status, text, "GET /metrics");
    return requestsInFlight(text);
  }

  private async sleeping(signal: AbortSignal): Promise<boolean> {
    try {
      const v = await tenantJson(this.base, "/is_sleeping", { signal });
      return (v as { is_sleeping?: unknown }).is_sleeping === true;
    } catch (err) {
      if (err instanceof UpstreamHttpError && err.status === 404) throw new Error(NOT_ENABLED);
      throw err;
    }
  }

  async release({ signal }: CallOptions): Promise<ReleaseCall> {
    try {
      if (await this.sleeping(signal)) return { tried: [], accepted: true };
      const n = await this.busy({ signal });
      if (n > 0) return { tried: [], accepted: false, error: `${n} request(s) still running; /sleep would abort them` };
    } catch (err) {
      if (signal.aborted) throw err;
      return { tried: [], accepted: false, error: describeFetchError(err) };
    }
    const r = await releaseEach(["sleep level 1"], signal, async () => {
      const { status } = await tenantCall(this.base, "/sleep?level=1", { signal, method: "POST" });
      return status >= 200 && status <= 299;
    });
    return { tried: ["sleep level 1"], ...r };
  }

  verify({ signal }: CallOptions): Promise<Holding> {
    return holdingFrom(() => this.resident({ signal }), "/is_sleeping", this.local, signal);
  }

  async resident({ signal }: CallOptions): Promise<Resident[]> {
    if (await this.sleeping(signal)) return [];
    const v = await tenantJson(this.base, "/v1/models", { signal }).catch(() => undefined);
    const data = (v as { data?: { id?: unknown }[] } | undefined)?.data;
    const name = Array.isArray(data) && typeof data[0]?.id === "string" ? data[0].id : "";
    return [{ name, state: "awake" }];
  }

  async probe(timeoutMs: number): Promise<string> {
    const signal = AbortSignal.timeout(timeoutMs);
    const { status } = await tenantCall(this.base, "/health", { signal });
    if (status !== 200) throw new Error(`/health: HTTP ${status}`);
    return "ok";
  }

  async restore({ signal }: CallOptions): Promise<void> {
    const { status, text } = await tenantCall(this.base, "/wake_up", { signal, method: "POST" });
    if (status < 200 || status > 299) throw new UpstreamHttpError(status, text, "POST /wake_up");
  }
}

export const vllmDriver: TenantDriver<VllmTenant> = {
  kind: "vllm",
  label: "vLLM",
  create: (ctx: TenantContext) => new VllmTenant(ctx.base, ctx.local),
};
