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
 * - Verify: SwarmUI's own API reports no memory figure, and ListBackends' `current_model` proves
 *   nothing: it is SwarmUI's bookkeeping (AbstractT2IBackend.CurrentModelName), cleared only when a
 *   backend shuts down, while FreeBackendMemory only forwards ComfyUI's `/free`
 *   (src/BuiltinExtensions/ComfyUIBackend/ComfyUIAPIAbstractBackend.cs FreeMemory). So verify
 *   lists the backends (ListBackends {full_data:true}), then reads each running ComfyUI backend's
 *   own `/system_stats`, relayed by SwarmUI at `GET /ComfyBackendDirect/system_stats` with the
 *   `X-Swarm-Backend-ID: <id>` header (ComfyUIRedirectHelper.ComfyBackendDirectHandler narrows the
 *   running ComfyUI backends to the one whose BackendData.ID matches, else answers 400). Each
 *   backend is judged by the comfyui driver's rule (comfy/device-memory.ts, comfy/client.ts
 *   `vramReleased`): released when its torch reservation fell to the floor or a tenth of what it
 *   was before the free. On a cpu/mps device the memory is the system's and never drops: that
 *   backend is released once the free was answered and its ComfyUI queue (`/ComfyBackendDirect/queue`)
 *   runs nothing. A backend that cannot be read keeps the card held, saying why; so does a
 *   SwarmUI with no ComfyUI backend to read. A route's refusal is a 200 with an `error` key: not
 *   accepted.
 * - Busy: GetCurrentStatus live_gens + waiting_gens. SwarmUI counts these per session
 *   (T2IAPI.cs, session.LiveGens), so they see the generations of SWARMUI_SESSION only; work from
 *   other sessions (SwarmUI's own page) keeps its backend's torch reservation up until it ends,
 *   which verify reads: the LLM side waits until that memory is back.
 */
import { vramReleased } from "../comfy/client.ts";
import { deviceMemory } from "../comfy/device-memory.ts";
import { callJson, isRecord, parseJson } from "../upstream/http.ts";
import { describeFetchError, isConnectionRefused } from "../upstream/upstream-errors.ts";
import type { CallOptions, Holding, ImageTenant, ReleaseCall, Resident, TenantContext, TenantDriver, WorkClass } from "./types.ts";

/** Routes (lowercased) whose request is a job on the card. */
export const SWARM_GPU_ROUTES: ReadonlySet<string> = new Set([
  "/api/generatetext2image",
  "/api/selectmodel",
  "/comfybackenddirect/prompt",
  "/comfybackenddirect/api/prompt",
]);

/**
 * Routes (lowercased) that run GPU work over a websocket (their handler takes one, so API.cs serves
 * them only as one): generations, the Grid Generator's and Image Batch tool's batches, a model
 * load, LoRA extraction and TensorRT builds on a backend. Their upgrade is refused (proxy/app.ts).
 */
export const SWARM_GPU_SOCKETS: ReadonlySet<string> = new Set([
  "/api/generatetext2imagews",
  "/api/selectmodelws",
  "/api/gridgenrun",
  "/api/imagebatchrun",
  "/api/doloraextractionws",
  "/api/dotensorrtcreatews",
]);

export class SwarmSessionError extends Error {}

/** One SwarmUI answer: its status and JSON body. */
interface Answer {
  status: number;
  body: unknown;
}

/** One backend as ListBackends {full_data:true} shows it. */
interface SwarmBackend {
  id: string;
  type: string;
  status: string;
  model: string | undefined;
}

/** ComfyUI-based backend types (ComfyUIBackendExtension.cs: comfyui_api, comfyui_selfstart; a remote SwarmUI linked to one). */
function isComfyBackend(b: SwarmBackend): boolean {
  return b.type.startsWith("comfyui") || b.type === "swarmswarmbackend";
}

export class SwarmTenant implements ImageTenant {
  readonly kind = "swarmui";
  readonly side = "image";
  readonly label = "SwarmUI";
  readonly dialect = "swarmui";
  #session: string;
  /** One GetNewSession at a time, shared by every call that found the session invalid. */
  #renewing: Promise<string> | undefined;
  /** Each backend's torch reservation read just before the last FreeBackendMemory: verify compares against it. */
  #before = new Map<string, number>();
  /** A FreeBackendMemory was answered since the last proven release (the cpu/mps rule needs it). */
  #freed = false;

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
    // The websocket routes are GET upgrades; every other route is a POST.
    if (SWARM_GPU_SOCKETS.has(p)) return "image-sync";
    return method === "POST" && SWARM_GPU_ROUTES.has(p) ? "image-sync" : "pass";
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
    if (this.#before.size === 0) {
      for (const r of await this.readings(o).catch(() => [])) if (r.torch !== undefined) this.#before.set(r.backend.id, r.torch);
    }
    try {
      const a = await this.call("FreeBackendMemory", { system_ram: false, backend: "all" }, o);
      const e = errorOf(a.body);
      if (a.status !== 200 || e) return { tried: ["all"], accepted: false, error: `FreeBackendMemory: HTTP ${a.status}${e ? ` ${e}` : ""}` };
      const r = isRecord(a.body) ? a.body : {};
      // result:false count:0 is "no running backend": nothing to free, which verify will confirm.
      if (r.result !== true) return { tried: ["all"], accepted: false, error: `FreeBackendMemory freed no backend (count ${String(r.count)})` };
      this.#freed = true;
      return { tried: ["all"], accepted: true };
    } catch (err) {
      if (o.signal.aborted) throw err;
      return { tried: ["all"], accepted: false, error: describeFetchError(err) };
    }
  }

  private async listBackends(o: CallOptions): Promise<SwarmBackend[]> {
    const body = await this.callOk("ListBackends", { full_data: true }, o);
    const out: SwarmBackend[] = [];
    for (const [key, b] of Object.entries(body)) {
      if (!isRecord(b)) continue;
      const id = typeof b.id === "number" || typeof b.id === "string" ? String(b.id) : key;
      const model = typeof b.current_model === "string" && b.current_model !== "" ? b.current_model : undefined;
      out.push({ id, type: typeof b.type === "string" ? b.type.toLowerCase() : "", status: typeof b.status === "string" ? b.status.toLowerCase() : "", model });
    }
    return out;
  }

  /** GET one ComfyUI route of one backend through SwarmUI's /ComfyBackendDirect relay. */
  private async direct(id: string, path: string, o: CallOptions): Promise<unknown> {
    const headers: Record<string, string> = { "x-swarm-backend-id": id };
    if (this.token) headers.cookie = `swarm_user_token=${this.token}`;
    const { status, text } = await callJson(this.base, `/ComfyBackendDirect/${path}`, { timeoutMs: this.callTimeoutMs, signal: o.signal, headers, method: "GET" });
    const body = parseJson(text);
    if (status !== 200 || !isRecord(body)) {
      // ComfyUIRedirectHelper.cs: 401 when the user lacks comfy_direct_calls, 400 when no running ComfyUI backend has this id.
      const why = status === 200 ? " without JSON" : status === 401 ? " (SWARMUI_TOKEN's user needs the comfy_direct_calls permission)" : "";
      throw new Error(`/ComfyBackendDirect/${path} of backend ${id}: HTTP ${status}${why}`);
    }
    return body;
  }

  /** Each running ComfyUI backend's own memory reading (or why it could not be read). */
  private async readings(o: CallOptions): Promise<Reading[]> {
    const list = (await this.listBackends(o)).filter((b) => isComfyBackend(b) && b.status === "running");
    return Promise.all(
      list.map(async (backend): Promise<Reading> => {
        try {
          const mem = deviceMemory(await this.direct(backend.id, "system_stats", o));
          return mem.shared ? { backend, shared: mem.shared } : { backend, torch: mem.torchReserved };
        } catch (err) {
          if (o.signal.aborted) throw err;
          return { backend, error: describeFetchError(err) };
        }
      }),
    );
  }

  /** A cpu/mps backend: anything queued or running on its ComfyUI? */
  private async runs(id: string, o: CallOptions): Promise<boolean> {
    const q = (await this.direct(id, "queue", o)) as Record<string, unknown>;
    const n = (v: unknown) => (Array.isArray(v) ? v.length : 0);
    return n(q.queue_running) + n(q.queue_pending) > 0;
  }

  async verify(o: CallOptions): Promise<Holding> {
    let readings: Reading[];
    try {
      readings = await this.readings(o);
    } catch (err) {
      if (this.local && isConnectionRefused(err)) return { held: false, notRunning: describeFetchError(err) };
      return { held: true, unreadable: `ListBackends unreadable: ${describeFetchError(err)}` };
    }
    const residents: Resident[] = readings.map((r) => ({ name: `${r.backend.model ?? "no model"} (backend ${r.backend.id})`, state: r.backend.status || undefined, vramBytes: r.torch }));
    if (readings.length === 0) return { held: true, residents, unreadable: "no running ComfyUI backend in ListBackends whose memory could be read" };
    const unread = readings.filter((r) => r.error !== undefined);
    if (unread.length > 0) return { held: true, residents, unreadable: `backend memory unreadable: ${unread.map((r) => `backend ${r.backend.id}: ${r.error}`).join("; ")}` };
    let held = false;
    let vramBytes = 0;
    for (const r of readings) {
      if (r.shared !== undefined) {
        // The system's memory: nothing of the card's own to measure. Released once the free was
        // answered and the backend's ComfyUI runs nothing.
        try {
          if (!this.#freed || (await this.runs(r.backend.id, o))) held = true;
        } catch (err) {
          if (o.signal.aborted) throw err;
          return { held: true, residents, unreadable: `backend ${r.backend.id} (${r.shared}) queue unreadable: ${describeFetchError(err)}` };
        }
        continue;
      }
      const now = r.torch ?? 0;
      vramBytes += now;
      if (!vramReleased(this.#before.get(r.backend.id) ?? 0, now)) held = true;
    }
    if (!held) {
      this.#before.clear();
      this.#freed = false;
    }
    return { held, residents, vramBytes };
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

  /** What the backends hold now: a torch reservation, or on a cpu/mps device the model SwarmUI names. */
  async resident(o: CallOptions): Promise<Resident[]> {
    const out: Resident[] = [];
    for (const r of await this.readings(o)) {
      const name = `${r.backend.model ?? ""} (backend ${r.backend.id})`;
      if (r.torch !== undefined && r.torch > 0) out.push({ name, state: r.backend.status || undefined, vramBytes: r.torch });
      else if (r.torch === undefined && r.backend.model) out.push({ name, state: r.backend.status || undefined });
    }
    return out;
  }

  async probe(timeoutMs: number): Promise<string> {
    const body = await this.callOk("GetCurrentStatus", {}, { signal: AbortSignal.timeout(timeoutMs) });
    const b = isRecord(body.backend_status) ? body.backend_status.status : undefined;
    return typeof b === "string" ? b : "up";
  }
}

/** One backend's memory as read through /ComfyBackendDirect/system_stats. */
interface Reading {
  backend: SwarmBackend;
  /** Torch reservation on a card with memory of its own. */
  torch?: number;
  /** The device type when the memory is the system's (cpu, mps, …). */
  shared?: string;
  /** Why it could not be read. */
  error?: string;
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
