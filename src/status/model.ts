/**
 * What the GPU is doing, for people (SPEC "Status API"): who holds it, who waits, the image job's
 * phase, upstream health, the last hour of states. Fed by events — lock transitions, image-job
 * phases, LLM request start/admit/end, health reports — and rendered to JSON only when asked.
 *
 * Per LLM request the cost is one small object and one Map insert and delete: this sits on the
 * hot path of every chat request (bench/ holds it under 5 µs per request).
 */
import type { ImageJobEvent, JobOutcome } from "../jobs/events.ts";
import type { GpuState, LockEvent } from "../lock/index.ts";
import { comfyJobNews, comfyMemory, residentModels, type ComfyMemory, type ResidentModel } from "./card.ts";
import type { LeaseEvent, LeaseView } from "./steer.ts";
import type { LockLines } from "./line.ts";
import { inLockOrder, waitReasons, type WaiterKey } from "./waiters.ts";

export type UpstreamName = "ollama" | "comfy";
/**
 * `waiting`: for the GPU; `retrying`: ComfyUI refused the connection, the GPU is given back until
 * the next try (not a holder); `sending`: /prompt on its way; `queued`: in ComfyUI's queue;
 * `running`: ComfyUI runs it.
 */
export type ImagePhase = "waiting" | "retrying" | "unloading" | "sending" | "queued" | "running" | "freeing";

/** One LLM request the turnstile is holding or admitting. Mutable, owned by the model. */
export class LlmRequest {
  waiting = true;
  /** Between tries at an upstream that refused the connection: neither holding nor waiting. */
  retrying = false;
  model: string | undefined = undefined;
  /** Served as part of the image job now on the GPU (the nested listener): listed under that job. */
  nested = false;
  constructor(
    readonly id: number,
    readonly path: string,
    readonly client: string | undefined,
    readonly since: number,
  ) {}
}

export interface ImageJobView {
  job: number;
  prompt_id: string | null;
  phase: ImagePhase;
  /** Epoch ms the GPU was granted (the job's hold began). */
  since: number;
  /** Epoch ms the current phase began. */
  phase_since: number;
  waited_ms: number;
  unload_ms?: number;
  forward_ms?: number;
  job_ms?: number;
  free_ms?: number;
  /** Bytes of ComfyUI's torch reservation given back by /free. */
  vram_reclaimed?: number;
  /** LLM requests the job's workflow made on the nested listener (LISTEN_OLLAMA_NESTED), while they run. */
  nested?: LlmRequestView[];
  /** Epoch ms the job reached the turnstile. */
  arrived?: number;
  /** Who sent it: the client's address (shown to those who may see addresses) and its ComfyUI client_id. */
  client?: string;
  client_id?: string;
  /** Epoch ms ComfyUI queued it (its /prompt answered) and began running it. */
  queued_since?: number;
  running_since?: number;
  /** ms in ComfyUI's queue and running, once each is over. */
  queue_ms?: number;
  run_ms?: number;
  /** ComfyUI's own number for a job picked up at start (its queue item's first field). */
  number?: number;
  /** Step x of y, from ComfyUI's `progress` frames where a client's /ws was relayed. */
  progress?: { value: number; max: number };
}

/** Someone waiting for the card, and why. */
export interface WaiterView {
  kind: "llm" | "image" | "lease";
  /** The LLM request's or image job's number; the lease holder's name for a lease. */
  id: number | string;
  /** Epoch ms it began waiting. */
  since: number;
  reason: string;
  /** The estimate of when the card is free for it: the figure a busy answer's Retry-After gives. */
  retry_after_s: number;
  client?: string;
}

/** One LLM request as the status shows it. */
export type LlmRequestView = { id: number; path: string; model: string | null; client?: string; age_ms: number; waiting: boolean; retrying?: true; since: number };

export interface RecentImageJob extends Omit<ImageJobView, "phase" | "phase_since"> {
  kind: "image_job";
  outcome: JobOutcome;
  held_ms: number;
  /** Epoch ms the job gave the GPU back. */
  ended: number;
}

export interface StateSpan {
  state: GpuState;
  /** Epoch ms. */
  from: number;
  /** Epoch ms; absent on the current (open) span. */
  to?: number;
}

export interface UpstreamView {
  /** null until the first probe has answered. */
  up: boolean | null;
  version: string | null;
  /** Why it is down, when it is. */
  reason?: string;
  /** Where it is (OLLAMA_URL, COMFY_URL), credentials masked. */
  url?: string;
  /**
   * Set while its last release was answered as done and its own report still showed the memory
   * held (Forge's unload-checkpoint): each image turn's end then holds the card up to FREE_TIMEOUT.
   */
  release_kept_memory?: string;
}

/** What subscribers hear as it happens (the SSE event names). */
export type StatusEvent =
  | { type: "state"; data: { state: GpuState; from: GpuState; since: number } }
  | { type: "job"; data: ImageJobView | (RecentImageJob & { phase: "done" }) | (Omit<ImageJobView, "phase"> & { phase: "left" }) }
  | { type: "upstream"; data: { name: UpstreamName } & UpstreamView }
  | { type: "lease"; data: LeaseEvent }
  | { type: "card"; data: CardView };

/** What the card holds as the upstreams last said: sent as `card` after every read of them. */
export type CardView = Pick<StatusDoc, "models" | "models_at" | "comfy_memory" | "coexist">;

/** COEXIST (SPEC "Co-residency"): the model staying beside the image session, and the last eject. */
export interface CoexistStatus {
  model: string | null;
  /** Bytes above COEXIST_MARGIN at the running workflow's learned peak, with the model resident. */
  headroom_bytes: number | null;
  /** The running session's learned peak (its highest workflow), when learned. */
  learned_peak_bytes: number | null;
  /** ComfyUI's free memory at the last reading during the session. */
  free_bytes: number | null;
  last_eject: { at: number; model: string; why: string; free_bytes: number | null } | null;
}

/** LLM requests and session jobs listed in the status document and the `holders` event; the rest are counted. */
export const MAX_LISTED = 100;

export interface StatusDoc {
  version: string;
  /** CARD_NAME (the host name unless set): which card this turnstile guards. */
  card: string;
  /** Ollama's resident models as its /api/ps last said (null until read), and when (epoch ms). */
  models: ResidentModel[] | null;
  models_at: number | null;
  /** ComfyUI's memory as /system_stats last said (null until read), and when (epoch ms). */
  comfy_memory: (ComfyMemory & { at: number }) | null;
  /** Only with COEXIST on. */
  coexist?: CoexistStatus;
  /** Everyone waiting for the card, in the order the lock will grant them (oldest first without the lock's lines), each with its reason and estimate. */
  waiting: WaiterView[];
  /** Waiters left out of `waiting` (exact). */
  waiting_omitted: number;
  state: GpuState;
  state_since: string;
  /** Epoch ms of this document, so a page can age the `since` fields with its own clock. */
  now: number;
  llm: {
    inflight: number;
    waiting: number;
    oldest_wait_ms: number;
    /** The first MAX_LISTED requests, those holding a slot first, oldest first (bounded: one event stays small). */
    requests: LlmRequestView[];
    /** Requests left out of `requests` (exact). */
    requests_omitted: number;
  };
  image: {
    running: (ImageJobView & { age_ms: number }) | null;
    /** Jobs in ComfyUI's own queue (accepted, not yet running). */
    queued: number;
    /** Image jobs waiting for the GPU (not yet in a session). */
    waiting: number;
    /** Image jobs between tries at a ComfyUI that refused the connection (not holding the GPU). */
    retrying: number;
    /**
     * The image session: its jobs, oldest first, at most MAX_LISTED, and how many more it holds
     * (exact); null when none.
     */
    session: { jobs: (ImageJobView & { age_ms: number })[]; jobs_omitted: number } | null;
    /** Every image job the turnstile has, waiting, retrying or holding, oldest first, at most MAX_LISTED. */
    jobs: (ImageJobView & { age_ms: number })[];
    /** Jobs left out of `jobs` (exact). */
    jobs_omitted: number;
  };
  /** The GPU lease held by an outside program, if any. */
  lease: { id: string; holder: string; since: number; age_ms: number; expires_at: string; expires_in_ms: number; client?: string } | null;
  upstreams: Partial<Record<UpstreamName, UpstreamView>>;
  recent: RecentImageJob[];
  /** The GPU's states over the last hour, oldest first; the last span is the current one. */
  history: StateSpan[];
}

export interface StatusModelOptions {
  version: string;
  /** CARD_NAME. Default "". */
  card?: string;
  upstreams: readonly UpstreamName[];
  /** Each upstream's URL as the status may show it (credentials masked by the caller). */
  upstreamUrls?: Partial<Record<UpstreamName, string>>;
  /** Wall clock, epoch ms. Default Date.now. */
  now?: () => number;
  /** How far back the state strip reaches. Default one hour. */
  historyMs?: number;
  /** At most this many spans are kept, however busy the hour. */
  maxSpans?: number;
  /** Finished image jobs kept for `recent`. */
  maxRecent?: number;
  /** Seconds a busy answer's Retry-After gives now: every waiter's estimate. */
  retryAfterS?: () => number;
  /** Leases asked for and not yet granted, oldest first (status/steer.ts). */
  leaseQueue?: () => readonly { holder: string; by: string; since: number }[];
  /** The lock's lines (issue 30): `waiting` is listed in the order it will grant. Absent: oldest first. */
  lockOrder?: () => LockLines;
  /** COEXIST on: what stays beside the image session (absent: off, and no `coexist` field). */
  coexist?: () => CoexistStatus;
}

const HOUR_MS = 3_600_000;

export class StatusModel {
  readonly #version: string;
  readonly #card: string;
  readonly #now: () => number;
  readonly #historyMs: number;
  readonly #maxSpans: number;
  readonly #maxRecent: number;
  readonly #listeners = new Set<(e: StatusEvent) => void>();

  readonly #requests = new Map<number, LlmRequest>();
  #nextRequest = 1;
  #state: GpuState = "idle";
  readonly #spans: StateSpan[];
  /** Jobs that hold (or held and are still finishing on) the GPU, by job id. */
  readonly #jobs = new Map<number, ImageJobView>();
  readonly #recent: RecentImageJob[] = [];
  readonly #upstreams = new Map<UpstreamName, UpstreamView>();
  #lease: LeaseView | null = null;
  readonly #coexist: (() => CoexistStatus) | undefined;
  readonly #retryAfterS: () => number;
  readonly #leaseQueue: () => readonly { holder: string; by: string; since: number }[];
  readonly #lockOrder: (() => LockLines) | undefined;
  #models: ResidentModel[] | null = null;
  #modelsAt: number | null = null;
  #comfyMemory: StatusDoc["comfy_memory"] = null;

  constructor(opts: StatusModelOptions) {
    this.#version = opts.version;
    this.#card = opts.card ?? "";
    this.#now = opts.now ?? Date.now;
    this.#historyMs = opts.historyMs ?? HOUR_MS;
    this.#maxSpans = opts.maxSpans ?? 4000;
    this.#maxRecent = opts.maxRecent ?? 20;
    this.#retryAfterS = opts.retryAfterS ?? (() => 0);
    this.#leaseQueue = opts.leaseQueue ?? (() => []);
    this.#lockOrder = opts.lockOrder;
    this.#coexist = opts.coexist;
    this.#spans = [{ state: "idle", from: this.#now() }];
    for (const u of opts.upstreams) this.#upstreams.set(u, withUrl({ up: null, version: null }, opts.upstreamUrls?.[u]));
  }

  subscribe(listener: (e: StatusEvent) => void): () => void {
    const entry = (e: StatusEvent) => listener(e);
    this.#listeners.add(entry);
    return () => void this.#listeners.delete(entry);
  }

  get subscribers(): number {
    return this.#listeners.size;
  }

  // --- LLM requests (the hot path; the proxy's LlmTracker) ---

  start(path: string, client: string | undefined): LlmRequest {
    const r = new LlmRequest(this.#nextRequest++, path, client, this.#now());
    this.#requests.set(r.id, r);
    return r;
  }

  admitted(r: LlmRequest): void {
    r.waiting = false;
    r.retrying = false;
    // A nested request whose job ended before it was sent holds an ordinary slot now.
    r.nested = false;
  }

  /** The upstream refused the connection; the slot is given back until the next try. */
  retrying(r: LlmRequest): void {
    r.waiting = false;
    r.retrying = true;
  }

  named(r: LlmRequest, model: string): void {
    r.model = model;
  }

  nested(r: LlmRequest): void {
    r.nested = true;
    r.waiting = false;
  }

  /** Idempotent: a stream's end and its client's abort may both report it. */
  end(r: LlmRequest): void {
    this.#requests.delete(r.id);
  }

  // --- events ---

  onLock(e: LockEvent): void {
    if (e.type !== "transition") return;
    const at = this.#now();
    const from = this.#state;
    this.#state = e.to;
    this.#spans[this.#spans.length - 1]!.to = at;
    this.#spans.push({ state: e.to, from: at });
    this.#pruneSpans(at);
    if (this.#listeners.size > 0) this.#emit({ type: "state", data: { state: e.to, from, since: at } });
  }

  onJob(e: ImageJobEvent): void {
    // A session's end and an unstoppable job change no job's phase; the jobs' own events follow.
    if (e.phase === "warmed" || e.phase === "warm_skipped" || e.phase === "session_ended" || e.phase === "unstoppable" || e.phase === "still_busy") return;
    const at = this.#now();
    let job = this.#jobs.get(e.jobId);
    switch (e.phase) {
      case "received":
        job = { job: e.jobId, prompt_id: e.promptId, phase: "waiting", since: at, phase_since: at, waited_ms: 0, arrived: at };
        if (e.client !== undefined) job.client = e.client;
        if (e.clientId !== undefined) job.client_id = e.clientId;
        this.#jobs.set(e.jobId, job);
        break;
      case "left":
        if (!job) return;
        this.#jobs.delete(e.jobId);
        this.#emit({ type: "job", data: { ...withoutClient(job), phase: "left" } });
        return;
      case "acquired":
        // A retry after ComfyUI refused the connection takes the GPU again: same job, new hold.
        // A job that joined a running session skips the hand-over: it goes straight to ComfyUI.
        if (!job) this.#jobs.set(e.jobId, (job = { job: e.jobId, prompt_id: null, phase: "waiting", since: at, phase_since: at, waited_ms: 0 }));
        job.phase = e.joined ? "sending" : "unloading";
        job.since = job.phase_since = at;
        job.waited_ms += e.waitedMs;
        break;
      case "retrying":
        if (!job) return;
        job.phase = "retrying";
        job.phase_since = at;
        break;
      case "unloaded":
        if (!job) return;
        job.phase = "sending";
        job.phase_since = at;
        job.unload_ms = e.durationMs;
        break;
      case "forwarded":
        if (!job) return;
        job.forward_ms = e.durationMs;
        if (e.clientId !== undefined) job.client_id = e.clientId;
        if (e.promptId) {
          job.prompt_id = e.promptId;
          job.phase = "queued";
          job.phase_since = job.queued_since = at;
        }
        break;
      case "started":
        if (!job || !this.#started(job, at)) return;
        break;
      case "adopted":
        // Found in ComfyUI at start: how long it queued before is not known, so it counts as running,
        // since ComfyUI began it where that is known (its jobs API, or STATE_DIR), else since now.
        if (!job) return;
        job.prompt_id = e.promptId;
        job.phase = "running";
        job.phase_since = job.running_since = at;
        if (e.startedAt !== undefined && e.startedAt < at) job.since = job.phase_since = job.running_since = e.startedAt;
        if (e.number !== undefined) job.number = e.number;
        break;
      case "finished":
        if (!job) return;
        job.phase = "freeing";
        if (job.running_since !== undefined) job.run_ms = at - job.running_since;
        else if (job.queued_since !== undefined) job.queue_ms = at - job.queued_since;
        job.phase_since = at;
        job.job_ms = e.durationMs;
        break;
      case "freed":
        this.#releaseVerdict(e);
        if (!job) return;
        job.free_ms = e.durationMs;
        if (e.vramBefore !== undefined && e.vramAfter !== undefined) job.vram_reclaimed = Math.max(0, e.vramBefore - e.vramAfter);
        return; // the phase stays "freeing" until the lock is given back
      case "released": {
        if (!job) return;
        this.#jobs.delete(e.jobId);
        const { phase: _p, phase_since: _s, ...rest } = job;
        const done: RecentImageJob = { kind: "image_job", ...rest, prompt_id: e.promptId ?? job.prompt_id, outcome: e.outcome, held_ms: e.heldMs, ended: at };
        this.#recent.push(done);
        if (this.#recent.length > this.#maxRecent) this.#recent.shift();
        this.#emit({ type: "job", data: { ...withoutClient(done), phase: "done" } });
        return;
      }
    }
    this.#emit({ type: "job", data: withoutClient(job) });
  }

  /** The job leaves ComfyUI's queue for its run; false when it was not queued. */
  #started(job: ImageJobView, at: number): boolean {
    if (job.phase !== "queued") return false;
    job.phase = "running";
    job.phase_since = job.running_since = at;
    if (job.queued_since !== undefined) job.queue_ms = at - job.queued_since;
    return true;
  }

  /**
   * A text frame ComfyUI sent on a relayed /ws: a prompt of ours started, or moved a step. The
   * socket's clientId is the client_id of the prompts it hears about (ComfyUI sends a prompt's
   * progress to the client that queued it). No event per step: `holders` carries it each tick.
   */
  onComfyFrame(clientId: string | null, frame: string): void {
    const news = comfyJobNews(frame);
    // Found by a scan of the jobs held, not a second map kept in step with them: a job sent again
    // under a new prompt id, or one that ended, leaves nothing stale behind.
    const job = news && [...this.#jobs.values()].find((j) => j.prompt_id === news.prompt_id);
    if (!job) return;
    if (clientId !== null && job.client_id === undefined) job.client_id = clientId;
    if ("max" in news) job.progress = { value: news.value, max: news.max };
    if (this.#started(job, this.#now())) this.#emit({ type: "job", data: withoutClient(job) });
  }

  /** Every good /api/ps answer. */
  onModels(raw: readonly unknown[]): void {
    this.#models = residentModels(raw);
    this.#modelsAt = this.#now();
    this.#emitCard();
  }

  /** Every good /system_stats answer. */
  onComfyStats(body: unknown): void {
    const m = comfyMemory(body);
    if (!m) return;
    this.#comfyMemory = { ...m, at: this.#now() };
    this.#emitCard();
  }

  /** What the card holds (resident models, ComfyUI's memory), as last read. */
  card(): CardView {
    return {
      models: this.#models && this.#models.map((m) => ({ ...m })),
      models_at: this.#modelsAt,
      comfy_memory: this.#comfyMemory && { ...this.#comfyMemory },
      ...(this.#coexist ? { coexist: this.#coexist() } : {}),
    };
  }

  /** Epoch ms the first resident model's keep-alive ends, as the last /api/ps said; null when none does. */
  nextModelExpiry(): number | null {
    let first: number | null = null;
    for (const m of this.#models ?? []) {
      const at = m.expires_at === null ? NaN : Date.parse(m.expires_at);
      if (!Number.isNaN(at) && (first === null || at < first)) first = at;
    }
    return first;
  }

  #emitCard(): void {
    if (this.#listeners.size > 0) this.#emit({ type: "card", data: this.card() });
  }

  /** The image side's release verdict: a lie is shown on its upstream until a release is proven. */
  #releaseVerdict(e: { released: boolean; lied?: boolean; error?: string }): void {
    const before = this.#upstreams.get("comfy");
    if (!before || (!e.lied && !(e.released && before.release_kept_memory))) return;
    const { release_kept_memory: _, ...rest } = before;
    const view = e.lied ? { ...rest, release_kept_memory: e.error ?? "the release was answered as done and the memory kept" } : rest;
    this.#upstreams.set("comfy", view);
    this.#emit({ type: "upstream", data: { name: "comfy", ...view } });
  }

  onUpstream(name: UpstreamName, up: boolean, detail: string): void {
    const before = this.#upstreams.get(name);
    const view = withUrl(up ? { up, version: detail } : { up, version: before?.version ?? null, reason: detail }, before?.url);
    this.#upstreams.set(name, view);
    if (before?.up === up && before.version === view.version) return;
    this.#emit({ type: "upstream", data: { name, ...view } });
  }

  // --- reading ---

  /** The whole document. `withClients`: include each request's client address (item 4's rule). */
  snapshot(withClients: boolean): StatusDoc {
    const now = this.#now();
    this.#pruneSpans(now);
    const { llm, image, waiting, waiting_omitted } = this.holders(withClients, now);
    const upstreams: StatusDoc["upstreams"] = {};
    for (const [name, v] of this.#upstreams) upstreams[name] = { ...v };
    return {
      version: this.#version,
      card: this.#card,
      state: this.#state,
      state_since: new Date(this.#spans[this.#spans.length - 1]!.from).toISOString(),
      now,
      ...this.card(),
      waiting,
      waiting_omitted,
      llm,
      image,
      lease: this.#leaseView(now, withClients),
      upstreams,
      recent: this.#recent.map((r) => (withClients ? { ...r } : withoutClient(r))),
      history: this.#spans.map((s) => ({ ...s })),
    };
  }

  /**
   * Who holds the GPU and who waits. With `now`, ages are filled in; without, they are 0 and
   * only the `since` times tell them, so two calls compare equal while nothing changed.
   */
  holders(withClients: boolean, now?: number): Pick<StatusDoc, "llm" | "image" | "waiting" | "waiting_omitted"> {
    const requests: StatusDoc["llm"]["requests"] = [];
    let nested: LlmRequestView[] | undefined;
    const waiters: { key: WaiterKey; view: Omit<WaiterView, "reason" | "retry_after_s"> }[] = [];
    let inflight = 0;
    let oldestWait = 0;
    for (const r of this.#requests.values()) {
      const age = now === undefined ? 0 : now - r.since;
      if (r.waiting) {
        if (age > oldestWait) oldestWait = age;
        const view: Omit<WaiterView, "reason" | "retry_after_s"> = { kind: "llm", id: r.id, since: r.since };
        if (withClients && r.client !== undefined) view.client = r.client;
        waiters.push({ key: { kind: "llm", id: r.id }, view });
      } else if (!r.retrying && !r.nested) inflight++;
      const view: StatusDoc["llm"]["requests"][number] = { id: r.id, path: r.path, model: r.model ?? null, age_ms: age, waiting: r.waiting, since: r.since };
      if (r.retrying) view.retrying = true;
      if (withClients && r.client !== undefined) view.client = r.client;
      if (r.nested) (nested ??= []).push(view);
      else requests.push(view);
    }
    const jobs = [...this.#jobs.values()].map((j) => {
      const { client, ...rest } = j;
      const view: ImageJobView & { age_ms: number } = { ...rest, age_ms: now === undefined ? 0 : now - j.since };
      if (withClients && client !== undefined) view.client = client;
      return view;
    });
    const held = jobs.filter((j) => j.phase !== "waiting" && j.phase !== "retrying");
    // ComfyUI runs a session's jobs in the order they were queued: the oldest is the one running.
    const running = held.find((j) => j.phase === "running") ?? held[0] ?? null;
    if (nested) {
      if (running) running.nested = nested;
      else requests.push(...nested);
    }
    for (const j of jobs) {
      if (j.phase !== "waiting") continue;
      const view: Omit<WaiterView, "reason" | "retry_after_s"> = { kind: "image", id: j.job, since: j.arrived ?? j.since };
      if (j.client !== undefined) view.client = j.client;
      waiters.push({ key: { kind: "image", job: j.job }, view });
    }
    for (const l of this.#leaseQueue()) {
      const view: Omit<WaiterView, "reason" | "retry_after_s"> = { kind: "lease", id: l.holder, since: l.since };
      if (withClients) view.client = l.by;
      waiters.push({ key: { kind: "lease", holder: l.holder }, view });
    }
    waiters.sort((a, b) => a.view.since - b.view.since);
    const ordered = this.#lockOrder ? inLockOrder(waiters, this.#lockOrder()) : waiters;
    const reasons = waitReasons({ state: this.#state, llmHolding: inflight, imageJob: running?.job ?? null, lease: this.#lease?.holder ?? null }, ordered.map((w) => w.key));
    const retryAfterS = waiters.length > 0 ? this.#retryAfterS() : 0;
    const count = (phase: ImagePhase) => jobs.reduce((n, j) => n + (j.phase === phase ? 1 : 0), 0);
    // Thousands of waiters must not push one `holders` event past a reader's limit (events.ts):
    // each list is cut at MAX_LISTED, with the exact count of what was left out beside it.
    const requestsOmitted = Math.max(0, requests.length - MAX_LISTED);
    if (requestsOmitted > 0) {
      requests.sort((a, b) => Number(a.waiting) - Number(b.waiting) || a.since - b.since);
      requests.length = MAX_LISTED;
    }
    return {
      llm: { inflight, waiting: waiters.reduce((n, w) => n + (w.key.kind === "llm" ? 1 : 0), 0), oldest_wait_ms: oldestWait, requests, requests_omitted: requestsOmitted },
      image: {
        running,
        queued: count("queued"),
        waiting: count("waiting"),
        retrying: count("retrying"),
        session: held.length > 0 ? { jobs: held.slice(0, MAX_LISTED), jobs_omitted: Math.max(0, held.length - MAX_LISTED) } : null,
        jobs: jobs.slice(0, MAX_LISTED),
        jobs_omitted: Math.max(0, jobs.length - MAX_LISTED),
      },
      waiting: ordered.slice(0, MAX_LISTED).map((w, i) => ({ ...w.view, reason: reasons[i]!, retry_after_s: retryAfterS })),
      waiting_omitted: Math.max(0, waiters.length - MAX_LISTED),
    };
  }

  // --- GPU leases (status/steer.ts) ---

  onLease(e: LeaseEvent): void {
    this.#lease = e.event === "end" ? null : e.lease;
    if (this.#listeners.size > 0) this.#emit({ type: "lease", data: e });
  }

  #leaseView(now: number, withClients: boolean): StatusDoc["lease"] {
    const l = this.#lease;
    if (!l) return null;
    const view: NonNullable<StatusDoc["lease"]> = { id: l.id, holder: l.holder, since: l.since, age_ms: now - l.since, expires_at: new Date(l.expires_at).toISOString(), expires_in_ms: Math.max(0, l.expires_at - now) };
    if (withClients) view.client = l.by;
    return view;
  }

  #pruneSpans(now: number): void {
    const spans = this.#spans;
    const cutoff = now - this.#historyMs;
    let drop = 0;
    while (drop < spans.length - 1 && (spans[drop]!.to! <= cutoff || spans.length - drop > this.#maxSpans)) drop++;
    if (drop > 0) spans.splice(0, drop);
  }

  #emit(e: StatusEvent): void {
    for (const l of [...this.#listeners]) {
      try {
        l(e);
      } catch {
        // A broken subscriber (a page's stream) must not break the lock's event delivery.
      }
    }
  }
}

function withUrl(view: UpstreamView, url: string | undefined): UpstreamView {
  if (url !== undefined) view.url = url;
  return view;
}

/**
 * A copy without the client's address. Events go to every reader alike, so they never carry it;
 * those who may see addresses get them in the document and in `holders`.
 */
function withoutClient<T extends { client?: string }>(v: T): T {
  const { client: _c, ...rest } = v;
  return rest as T;
}
