/**
 * LM Studio's REST v1 as an LLM-side tenant (tenants.md). A model may be loaded more than once,
 * as instances `key`, `key:2`…, and unloading by the base key unloads the first instance only:
 * so release unloads every instance id `GET /api/v1/models` lists under `loaded_instances`, and
 * verify wants every `loaded_instances` empty. A completion for a model that is not loaded loads
 * it (JIT loading), so every POST but the unload (and the download) is LLM work. When the server
 * requires a token, LMSTUDIO_TOKEN is sent as `Authorization: Bearer`.
 */
import { describeFetchError } from "../upstream/upstream-errors.ts";
import { holdingFrom, listOf, releaseEach, tenantJson } from "./llm-http.ts";
import type { CallOptions, Holding, LlmTenant, ReleaseCall, Resident, TenantContext, TenantDriver, WorkClass } from "./types.ts";
import { UpstreamHttpError } from "../upstream/http.ts";

const NOT_GPU_POSTS = new Set(["/api/v1/models/unload", "/api/v1/models/download", "/api/v0/models/unload"]);

/** Every loaded instance, from `/api/v1/models`. */
export function loadedInstances(v: unknown): Resident[] {
  return listOf(v, "models", "/api/v1/models").flatMap((m) =>
    (Array.isArray(m.loaded_instances) ? m.loaded_instances : []).map((i: unknown) => ({
      name: String((i as Record<string, unknown> | null)?.id ?? m.key ?? ""),
      state: "loaded",
    })),
  );
}

export class LmStudioTenant implements LlmTenant {
  readonly kind = "lmstudio";
  readonly side = "llm";
  readonly label = "LM Studio";

  constructor(
    readonly base: URL,
    private readonly token: string,
    private readonly local: boolean,
  ) {}

  classify(method: string, path: string): WorkClass {
    return method === "POST" && !NOT_GPU_POSTS.has(path) ? "llm" : "pass";
  }

  private get(path: string, signal: AbortSignal): Promise<unknown> {
    return tenantJson(this.base, path, { signal, token: this.token || undefined });
  }

  async release({ signal }: CallOptions): Promise<ReleaseCall> {
    let ids: string[];
    try {
      ids = (await this.resident({ signal })).map((r) => r.name);
    } catch (err) {
      if (signal.aborted) throw err;
      return { tried: [], accepted: false, error: `/api/v1/models: ${describeFetchError(err)}` };
    }
    const r = await releaseEach(ids, signal, async (instance_id) => {
      try {
        await tenantJson(this.base, "/api/v1/models/unload", { signal, token: this.token || undefined, body: { instance_id } });
        return true;
      } catch (err) {
        // Gone between the listing and the unload: nothing to release.
        if (err instanceof UpstreamHttpError && err.status === 404) return true;
        throw err;
      }
    });
    return { tried: ids, ...r };
  }

  verify({ signal }: CallOptions): Promise<Holding> {
    return holdingFrom(() => this.resident({ signal }), "/api/v1/models", this.local, signal);
  }

  async resident({ signal }: CallOptions): Promise<Resident[]> {
    return loadedInstances(await this.get("/api/v1/models", signal));
  }

  async probe(timeoutMs: number): Promise<string> {
    const signal = AbortSignal.timeout(timeoutMs);
    await this.get("/api/v1/models", signal);
    return "ok";
  }
}

export const lmStudioDriver: TenantDriver<LmStudioTenant> = {
  kind: "lmstudio",
  label: "LM Studio",
  create: (ctx: TenantContext) => new LmStudioTenant(ctx.base, ctx.config.lmstudioToken, ctx.local),
};
