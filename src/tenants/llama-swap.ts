/**
 * llama-swap as an LLM-side tenant (tenants.md): it starts a model's process on the first request
 * that names it, so every POST (its OpenAI routes) and everything under `/upstream/` (which talks
 * to a model's own server, starting it) is LLM work. Release is `POST /api/models/unload` (all);
 * the proof is `GET /running` answering `{"running":[]}`.
 */
import { holdingFrom, listOf, releaseEach, tenantCall, tenantJson } from "./llm-http.ts";
import type { CallOptions, Holding, LlmTenant, ReleaseCall, Resident, TenantContext, TenantDriver, WorkClass } from "./types.ts";

export class LlamaSwapTenant implements LlmTenant {
  readonly kind = "llama-swap";
  readonly side = "llm";
  readonly label = "llama-swap";

  constructor(
    readonly base: URL,
    private readonly local: boolean,
  ) {}

  classify(method: string, path: string): WorkClass {
    if (path.startsWith("/upstream/")) return "llm";
    if (method === "POST") return path === "/api/models/unload" || path.startsWith("/api/models/unload/") ? "pass" : "llm";
    return "pass";
  }

  async release({ signal }: CallOptions): Promise<ReleaseCall> {
    const r = await releaseEach(["all"], signal, async () => {
      const { status } = await tenantCall(this.base, "/api/models/unload", { signal, method: "POST" });
      return status >= 200 && status <= 299;
    });
    return { tried: ["all"], ...r };
  }

  verify({ signal }: CallOptions): Promise<Holding> {
    return holdingFrom(() => this.resident({ signal }), "/running", this.local, signal);
  }

  async resident({ signal }: CallOptions): Promise<Resident[]> {
    return listOf(await tenantJson(this.base, "/running", { signal }), "running", "/running").map((r) => ({
      name: String(r.model ?? ""),
      ...(typeof r.state === "string" ? { state: r.state } : {}),
    }));
  }

  async probe(timeoutMs: number): Promise<string> {
    const signal = AbortSignal.timeout(timeoutMs);
    const { status, text } = await tenantCall(this.base, "/health", { signal });
    if (status !== 200) throw new Error(`/health: HTTP ${status}`);
    return text.trim().slice(0, 20) || "ok";
  }
}

export const llamaSwapDriver: TenantDriver<LlamaSwapTenant> = {
  kind: "llama-swap",
  label: "llama-swap",
  create: (ctx: TenantContext) => new LlamaSwapTenant(ctx.base, ctx.local),
};
