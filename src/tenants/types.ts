/**
 * The tenant contract (issue 29): every program that shares the card is driven through this one
 * small interface, one driver file per kind of server. The lock and the proxy never learn which
 * server they talk to; the composition root picks one LLM-side and one image-side driver from
 * LLM_KIND and IMAGE_KIND (registry.ts).
 *
 * The rule every driver keeps: a release is proven from the tenant's own report (`verify`), never
 * from the 200 of the release call. Several servers answer 200 and keep the memory.
 */
import type { Config } from "../config/types.ts";
import type { LlmKind, ImageKind } from "../config/tenant-kinds.ts";
import type { ErrorReply, ImageDialect } from "../http/dialect.ts";

export type { LlmKind, ImageKind };

/** Which half of the card a tenant is: the LLM side (many requests at once) or the image side (one job). */
export type Side = "llm" | "image";

/**
 * What one request is to the card, decided from its method and routed path (proxy/classify.ts's
 * `routedPath`: percent-decoded, dot segments resolved), before its body is read:
 * - `llm`: LLM inference; takes an LLM slot (any number at once). A request that may load a model
 *   (llama-server's autoload, LM Studio's JIT load) is `llm` too.
 * - `image-async`: enqueues image work that runs after the answer (ComfyUI's /prompt); the job is
 *   followed to its end by the driver's own machinery (ComfyUI's: jobs/image-job.ts).
 * - `image-sync`: the request is the job (A1111's /sdapi/v1/txt2img, SwarmUI's
 *   /API/GenerateText2Image): the image slot is held from before it is sent until its answer ends
 *   or the client goes, bounded by JOB_TIMEOUT (tenants/sync-job.ts).
 * - `pass`: uses no GPU (listings, status, files); forwarded without the lock.
 */
export type WorkClass = "llm" | "image-async" | "image-sync" | "pass";

/** One thing a tenant holds on the card, for the status page, the metrics and the logs. */
export interface Resident {
  /** A model id, an instance id, a checkpoint name; "" when the tenant cannot name it. */
  name: string;
  /** The tenant's own word for its state (`loaded`, `loading`, `sleeping`, …), when it has one. */
  state?: string;
  /** Bytes on the GPU, when the tenant reports them. */
  vramBytes?: number;
}

/** One reading of what a tenant holds, from its own report (a listing, a memory figure). */
export interface Holding {
  /** True while anything is still held on the card by the tenant's own account. */
  held: boolean;
  /** What it holds (for the log line when the release is not proven in time). */
  residents?: Resident[];
  /** GPU memory the tenant reports in use, when it reports one (A1111's cuda section, ComfyUI's torch_vram). */
  vramBytes?: number;
  /** The report could not be read: `held` is then the driver's safe guess (true unless it is known gone). */
  unreadable?: string;
  /** The tenant is not running at all (its port refuses on this machine): it holds nothing. */
  notRunning?: string;
}

/** What one release call did: the 200 it got proves nothing, but it is what a "lied" verdict compares against. */
export interface ReleaseCall {
  /** What the release was sent to (model names, instance ids, "all", a backend id), in order. */
  tried: string[];
  /** Every release call was answered as successful (2xx, `{"success":true}`, `{"result":true}`). */
  accepted: boolean;
  /** Why not, when not. */
  error?: string;
}

/**
 * A hand-over's verdict (tenants/hand-over.ts), which the image job and the lease events carry
 * to the log, the status and the metrics.
 */
export interface Released {
  /** Proven from the tenant's own report within the bound. */
  released: boolean;
  tried: string[];
  durationMs: number;
  error?: string;
  /** The tenant answered the release as successful and its own report still showed the memory held at the bound (Forge's unload-checkpoint). */
  lied?: boolean;
  notRunning?: string;
  vramBefore?: number;
  vramAfter?: number;
}

/** Per-call bound: every call a driver makes takes a signal, aborted when its step's bound passes. */
export interface CallOptions {
  signal: AbortSignal;
}

/** What every tenant, of either side, does. */
export interface TenantBase {
  readonly kind: string;
  readonly side: Side;
  /** The server's name for humans and errors: "Ollama", "llama-server", "ComfyUI", "Forge/AUTOMATIC1111". */
  readonly label: string;
  /** Its URL (OLLAMA_URL for the LLM side, COMFY_URL for the image side). */
  readonly base: URL;
  /** What a request is to the card. Pure and cheap: called on every request. */
  classify(method: string, routedPath: string): WorkClass;
  /**
   * Send the release: unload each loaded model / unload all / sleep / unload the checkpoint / free
   * every backend. Called again on each poll while `verify` says held (so a model that started
   * loading meanwhile is unloaded too): it must be safe to repeat. Must not throw for an answer
   * it does not like: say so in `error`. May throw only when `signal` aborted.
   */
  release(o: CallOptions): Promise<ReleaseCall>;
  /** One reading of the tenant's own report of what it holds. Never trusts `release`'s answer; a reading that throws counts as unreadable. */
  verify(o: CallOptions): Promise<Holding>;
  /** What it holds now, for the status page and metrics: [] when nothing; throws when it cannot say. */
  resident(o: CallOptions): Promise<Resident[]>;
  /** A cheap liveness probe for /healthz and the status (PROBE_TIMEOUT): the server's version or a word; throws when down. */
  probe(timeoutMs: number): Promise<string>;
  /**
   * Optional: a driver whose release and verify interleave in a way of their own (Ollama's blind
   * unload when /api/ps cannot be read) runs the whole hand-over itself within `bound`. The others
   * get tenants/hand-over.ts's loop: [drain busy] → release → verify, polled, release repeated.
   */
  handOver?(bound: HandOverBound): Promise<Released>;
}

/** The bound of one hand-over: UNLOAD_TIMEOUT / UNLOAD_POLL_INTERVAL (LLM side), FREE_TIMEOUT / FREE_POLL_INTERVAL (image side). */
export interface HandOverBound {
  timeoutMs: number;
  pollMs: number;
  /** One reading of the tenant's report; after it the report counts as unreadable (PROBE_TIMEOUT). */
  callTimeoutMs: number;
  /** The longest the drain (`busy` down to 0) may take before the release goes ahead; default `timeoutMs`. On the image side: JOB_TIMEOUT. */
  drainTimeoutMs?: number;
  /** COEXIST (jobs/coexist.ts): a model admitted to stay; only Ollama's hand-over spares it. */
  keep?: string;
}

/** The LLM side: Ollama, llama-server (router mode), llama-swap, LM Studio, vLLM. */
export interface LlmTenant extends TenantBase {
  readonly side: "llm";
  /**
   * Work the tenant runs that did not come through the turnstile (vLLM's
   * `vllm:num_requests_running` + `_waiting`). When present, the hand-over to the image side waits
   * (polling, within UNLOAD_TIMEOUT) until it says 0 BEFORE calling `release`: vLLM's /sleep aborts
   * requests in flight. The turnstile's own LLM requests are already drained by the lock.
   */
  busy?(o: CallOptions): Promise<number>;
  /**
   * Optional: a request the turnstile answers itself, in the client's dialect, because it manages
   * what the request would do and the client's own call would break other clients (vLLM's /sleep:
   * it aborts requests in flight and nothing wakes vLLM before the next chat). Undefined for every
   * other request. Pure and cheap: called on every request, before `classify`.
   */
  refuse?(method: string, routedPath: string): ErrorReply | undefined;
  /**
   * Called once before the first LLM request after an image turn (or a lease), with that request
   * waiting (vLLM's /wake_up). A failure is logged and the request is sent anyway (the tenant's
   * own error then reaches the client). Bounded by UNLOAD_TIMEOUT.
   */
  restore?(o: CallOptions): Promise<void>;
  /**
   * Optional: what the tenant loaded right after the card came back from the image side, read once
   * when the first LLM request after that hand-off gives its slot back (tenants/after-load.ts);
   * each finding is logged at warn. llama-server: a model its `--fit` squeezed into what was free.
   */
  afterLoad?(o: CallOptions): Promise<string[]>;
}

/** The image side: ComfyUI, AUTOMATIC1111/Forge, SwarmUI. */
export interface ImageTenant extends TenantBase {
  readonly side: "image";
  /** How the tenant's own clients read an error: the turnstile's own answers on its listener use it (ComfyUI's when absent). */
  readonly dialect?: ImageDialect;
  /**
   * Image work the tenant still runs (SwarmUI's live_gens + waiting_gens, A1111's progress
   * job_count). A synchronous job's end is its answer's end; when present, the image side is
   * released only once this says 0 too (polled within JOB_TIMEOUT: the hand-over's drain), so work
   * sent around the turnstile is not cut short by the release.
   */
  busy?(o: CallOptions): Promise<number>;
  /**
   * Optional: a request the turnstile answers itself, in the client's dialect, because it manages
   * what the request would do and the client's own call would break other clients (vLLM's /sleep:
   * it aborts requests in flight and nothing wakes vLLM before the next chat). Undefined for every
   * other request. Pure and cheap: called on every request, before `classify`.
   */
  refuse?(method: string, routedPath: string): ErrorReply | undefined;
  /**
   * Optional: bring back what `release` dropped (A1111's reload-checkpoint). Called when each image
   * session opens, after the LLM side's hand-over and before the session's first job is sent: a
   * no-op unless the driver's own release dropped something (a job's end, a lease, the start). A failure is passed over: the job goes
   * on, and the tenant's own answer to it says what is wrong.
   */
  restore?(o: CallOptions): Promise<void>;
  /**
   * Optional: stop the work running now (A1111's /sdapi/v1/interrupt, SwarmUI's InterruptAll).
   * Called when a synchronous job passed JOB_TIMEOUT or its client went away, before the release.
   */
  interrupt?(o: CallOptions): Promise<void>;
}

export type Tenant = LlmTenant | ImageTenant;

/** What a driver is built from. Drivers read their own settings (tokens, levels) from `config`. */
export interface TenantContext {
  /** OLLAMA_URL or COMFY_URL, parsed. */
  base: URL;
  config: Config;
  /** An upstream on this machine whose port refuses holds no memory (its process is gone). */
  local: boolean;
}

/** One entry of the registry: how to build a driver of a kind. */
export interface TenantDriver<T extends Tenant> {
  readonly kind: string;
  readonly label: string;
  create(ctx: TenantContext): T;
}
