/**
 * SwarmUI as an image-side tenant (IMAGE_KIND=swarmui).
 *
 * - Calls: `POST /API/<Route>` with a JSON body carrying `session_id`. The session is
 *   SWARMUI_SESSION when set, else one from GetNewSession; either is renewed once when SwarmUI
 *   answers 401 `invalid_session_id` (it restarted, or cleaned the session up). SWARMUI_TOKEN is
 *   sent as the `swarm_user_token` cookie, for a SwarmUI that requires accounts. Route names are
 *   case-insensitive in SwarmUI (API.cs lowercases them), so classify is too.
 * - The job: GenerateText2Image is synchronous (the request is the job), as is SelectModel (it
 *   loads a model on the backends); GenerateText2ImageWS lasts as long as its socket.
 * - Release: FreeBackendMemory {system_ram:false, backend:"all"} → {result:true,count:n}. It
 *   answers once each backend was asked; the memory comes back later (SwarmUI's own words: "give
 *   at least one full second"), after the backend's running generation.
 * - Verify: SwarmUI reports no memory figure. ListBackends {full_data:true}: released when no
 *   backend names a `current_model`. A route's refusal is a 200 with an `error` key: not accepted.
 * - Busy: GetCurrentStatus live_gens + waiting_gens. SwarmUI counts these per session
 *   (T2IAPI.cs, session.LiveGens), so they see the generations of SWARMUI_SESSION only; work from
 *   other sessions (SwarmUI's own page) shows as a backend's current_model instead, which verify
 *   reads: the LLM side waits until that memory is back.
 */
import { callJson, isRecord, parseJson } from "../upstream/http.ts";
import { describeFetchError, isConnectionRefused } from "../upstream/upstream-errors.ts";
import type { CallOptions, Holding, ImageTenant, ReleaseCall, Resident, TenantContext, TenantDriver, WorkClass } from "./types.ts";

/** Routes (lowercased) whose request is a job on the card. */
export const SWARM_GPU_ROUTES: ReadonlySet<string> = new Set([
  "/api/generatetext2image",
  "/api/generatetext2imagews",
  "/api/selectmodel",
  "/api/selectmodelws",
  "/comfybackenddirect/prompt",
  "/comfybackenddirect/api/prompt",
]);

export class SwarmSessionError extends Error {}

/** One SwarmUI answer: its status and JSON body. */
interface Answer {
  status: number;
  body: unknown;
}

export class SwarmTenant implements ImageTenant {
  readonly kind = "swarmui";
  readonly side = "image";
  readonly label = "SwarmUI";
  #session: string;
  /** One GetNewSession at a time, shared by every call that found the session invalid. */
  #renewing: Promise<string> | undefined;

  constructor(
    readonly base: URL,
    private readonly callTimeoutMs: number,
    private readonly local: boolean,
    session: string,
    private readonly token: string,
  ) {
    this.#session = session;
  }

  /** The session in use (for tests; never logged: a session is a credential). */
  get session(): string {
    return this.#session;
  }

  classify(method: string, path: string): WorkClass {
    const p = path.toLowerCase();
    if (!SWARM_GPU_ROUTES.has(p)) return "pass";
    // The WS routes are GET upgrades; every other route is a POST.
    return method === "POST" || p.endsWith("ws") ? "image-sync" : "pass";
  }

  private async post(route: string, body: Record<string, unknown>, o: CallOptions): Promise<Answer> {
    const headers: Record<string, string> = this.token ? { cookie: `swarm_user_token=${this.token}` } : {};
    const { status, text } = await callJson(this.base, `/API/${route}`, { timeoutMs: this.callTimeoutMs, signal: o.signal, body, headers });
    return { status, body: parseJson(text) };
  }

  private async newSession(o: CallOptions): Promise<string> {
    this.#renewing ??= (async () => {
      const a = await this.post("GetNewSession", {}, o);
      const id = isRecord(a.body) ? a.body.session_id : undefined;
      if (a.status !== 200 || typeof id !== "string" || id === "") {
        const hint = this.token ? "" : " (a SwarmUI that requires accounts needs SWARMUI_TOKEN)";
        throw new SwarmSessionError(`GetNewSession answered ${a.status} without a session_id${hint}`);
      }
      this.#session = id;
      return id;
    })().finally(() => {
      this.#renewing = undefined;
    });
    return this.#renewing;
  }

  /** A call with the session, obtained first when there is none, renewed once when SwarmUI says it is invalid. */
  private async call(route: string, body: Record<string, unknown>, o: CallOptions): Promise<Answer> {
    if (!this.#session) await this.newSession(o);
    const sent = this.#session;
    let a = await this.post(route, { ...body, session_id: sent }, o);
    if (a.status === 401 && isRecord(a.body) && a.body.error_id === "invalid_session_id") {
      // Another call may have renewed it meanwhile.
      if (this.#session === sent) await this.newSession(o);
      a = await this.post(route, { ...body, session_id: this.#session }, o);
    }
    return a;
  }

  private async callOk(route: string, body: Record<string, unknown>, o: CallOptions): Promise<Record<string, unknown>> {
    const a = await this.call(route, body, o);
    if (a.status !== 200 || !isRecord(a.body)) throw new Error(`${route}: HTTP ${a.status} ${errorOf(a.body) ?? ""}`.trim());
    const e = errorOf(a.body);
    if (e) throw new Error(`${route}: ${e}`);
    return a.body;
  }

  async release(o: CallOptions): Promise<ReleaseCall> {
    try {
      const a = await this.call("FreeBackendMemory", { system_ram: false, backend: "all" }, o);
      const e = errorOf(a.body);
      if (a.status !== 200 || e) return { tried: ["all"], accepted: false, error: `FreeBackendMemory: HTTP ${a.status}${e ? ` ${e}` : ""}` };
      const r = isRecord(a.body) ? a.body : {};
      // result:false count:0 is "no running backend": nothing to free, which verify will confirm.
      if (r.result !== true) return { tried: ["all"], accepted: false, error: `FreeBackendMemory freed no backend (count ${String(r.count)})` };
      return { tried: ["all"], accepted: true };
    } catch (err) {
      if (o.signal.aborted) throw err;
      return { tried: ["all"], accepted: false, error: describeFetchError(err) };
    }
  }

  private async backends(o: CallOptions): Promise<Resident[]> {
    const body = await this.callOk("ListBackends", { full_data: true }, o);
    const out: Resident[] = [];
    for (const [id, b] of Object.entries(body)) {
      if (!isRecord(b)) continue;
      const model = b.current_model;
      if (typeof model === "string" && model !== "") out.push({ name: `${model} (backend ${id})`, state: typeof b.status === "string" ? b.status : undefined });
    }
    return out;
  }

  async verify(o: CallOptions): Promise<Holding> {
    try {
      const residents = await this.backends(o);
      return { held: residents.length > 0, residents };
    } catch (err) {
      if (this.local && isConnectionRefused(err)) return { held: false, notRunning: describeFetchError(err) };
      return { held: true, unreadable: `ListBackends unreadable: ${describeFetchError(err)}` };
    }
  }

  async busy(o: CallOptions): Promise<number> {
    const body = await this.callOk("GetCurrentStatus", {}, o);
    const s = isRecord(body.status) ? body.status : undefined;
    if (!s) throw new Error("GetCurrentStatus has no status");
    return count(s.live_gens) + count(s.waiting_gens);
  }

  /** Stops the generations of every session of the turnstile's user (SwarmUI without accounts: everyone's). */
  async interrupt(o: CallOptions): Promise<void> {
    await this.callOk("InterruptAll", { other_sessions: true }, o);
  }

  resident(o: CallOptions): Promise<Resident[]> {
    return this.backends(o);
  }

  async probe(timeoutMs: number): Promise<string> {
    const body = await this.callOk("GetCurrentStatus", {}, { signal: AbortSignal.timeout(timeoutMs) });
    const b = isRecord(body.backend_status) ? body.backend_status.status : undefined;
    return typeof b === "string" ? b : "up";
  }
}

function errorOf(body: unknown): string | undefined {
  if (!isRecord(body)) return undefined;
  if (typeof body.error === "string") return body.error;
  if (typeof body.error_id === "string") return body.error_id;
  return undefined;
}

function count(v: unknown): number {
  return typeof v === "number" && Number.isFinite(v) && v > 0 ? v : 0;
}

export const swarmDriver: TenantDriver<SwarmTenant> = {
  kind: "swarmui",
  label: "SwarmUI",
  create: (ctx: TenantContext) => new SwarmTenant(ctx.base, ctx.config.probeTimeoutMs, ctx.local, ctx.config.swarmuiSession, ctx.config.swarmuiToken),
};
