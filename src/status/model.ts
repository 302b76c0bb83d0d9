/**
 * What the GPU is doing, for people (SPEC "Status API"): who holds it, who waits, the image job's
 * phase, upstream health, the last hour of states. Fed by events — lock transitions, image-job
 * phases, LLM request start/admit/end, health reports — and rendered to JSON only when asked.
 *
 * Per LLM request the cost is one small object and one Map insert and delete: this sits on the
 * hot path of every chat request (bench/ holds it under 5 µs per request).
 */
import type { ImageJobEvent, JobOutcome } from "../jobs/events.ts";
import type { GpuState, LockEvent, LockSnapshot } from "../lock/index.ts";
import type { LeaseEvent, LeaseView } from "./steer.ts";

export type UpstreamName = "ollama" | "comfy";
export type ImagePhase = "unloading" | "queued" | "running" | "freeing";

/** One LLM request the turnstile is holding or admitting. Mutable, owned by the model. */
export class LlmRequest {
  waiting = true;
  model: string | undefined = undefined;
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
}

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
}

/** What subscribers hear as it happens (the SSE event names). */
export type StatusEvent =
  | { type: "state"; data: { state: GpuState; from: GpuState; since: number } }
  | { type: "job"; data: ImageJobView | (RecentImageJob & { phase: "done" }) }
  | { type: "upstream"; data: { name: UpstreamName } & UpstreamView }
  | { type: "lease"; data: LeaseEvent };

export interface StatusDoc {
  version: string;
  state: GpuState;
  state_since: string;
  /** Epoch ms of this document, so a page can age the `since` fields with its own clock. */
  now: number;
  llm: {
    inflight: number;
    waiting: number;
    oldest_wait_ms: number;
    requests: { id: number; path: string; model: string | null; client?: string; age_ms: number; waiting: boolean; since: number }[];
  };
  image: {
    running: (ImageJobView & { age_ms: number }) | null;
    /** Image jobs waiting for the GPU (not yet in a session). */
    queued: number;
    /** The image session: every job it holds, oldest first (the first is `running`); null when none. */
    session: { jobs: (ImageJobView & { age_ms: number })[] } | null;
  };
  /** The GPU lease held by an outside program, if any. */
  lease: { id: string; holder: string; since: number; age_ms: number; expires_at: string; expires_in_ms: number } | null;
  upstreams: Partial<Record<UpstreamName, UpstreamView>>;
  recent: RecentImageJob[];
  /** The GPU's states over the last hour, oldest first; the last span is the current one. */
  history: StateSpan[];
}

export interface StatusModelOptions {
  version: string;
  /** Counts the model cannot see in events (waiting image jobs). */
  lock: { snapshot(): LockSnapshot };
  upstreams: readonly UpstreamName[];
  /** Wall clock, epoch ms. Default Date.now. */
  now?: () => number;
  /** How far back the state strip reaches. Default one hour. */
  historyMs?: number;
  /** At most this many spans are kept, however busy the hour. */
  maxSpans?: number;
  /** Finished image jobs kept for `recent`. */
  maxRecent?: number;
}

const HOUR_MS = 3_600_000;

export class StatusModel {
  readonly #version: string;
  readonly #lock: { snapshot(): LockSnapshot };
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

  constructor(opts: StatusModelOptions) {
    this.#version = opts.version;
    this.#lock = opts.lock;
    this.#now = opts.now ?? Date.now;
    this.#historyMs = opts.historyMs ?? HOUR_MS;
    this.#maxSpans = opts.maxSpans ?? 4000;
    this.#maxRecent = opts.maxRecent ?? 20;
    this.#spans = [{ state: "idle", from: this.#now() }];
    for (const u of opts.upstreams) this.#upstreams.set(u, { up: null, version: null });
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
  }

  named(r: LlmRequest, model: string): void {
    r.model = model;
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
    if (e.phase === "warmed" || e.phase === "warm_skipped" || e.phase === "retrying" || e.phase === "session_ended" || e.phase === "unstoppable") return;
    const at = this.#now();
    let job = this.#jobs.get(e.jobId);
    switch (e.phase) {
      case "acquired":
        // A retry after ComfyUI refused the connection takes the GPU again: same job, new hold.
        // A job that joined a running session skips the hand-over: it goes straight to ComfyUI's queue.
        job = { job: e.jobId, prompt_id: null, phase: e.joined ? "queued" : "unloading", since: at, phase_since: at, waited_ms: e.waitedMs };
        this.#jobs.set(e.jobId, job);
        break;
      case "unloaded":
        if (!job) return;
        job.phase = "queued";
        job.phase_since = at;
        job.unload_ms = e.durationMs;
        break;
      case "forwarded":
        if (!job) return;
        job.forward_ms = e.durationMs;
        if (e.promptId) {
          job.prompt_id = e.promptId;
          job.phase = "running";
          job.phase_since = at;
        }
        break;
      case "adopted":
        if (!job) return;
        job.prompt_id = e.promptId;
        job.phase = "running";
        job.phase_since = at;
        break;
      case "finished":
        if (!job) return;
        job.phase = "freeing";
        job.phase_since = at;
        job.job_ms = e.durationMs;
        break;
      case "freed":
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
            this.#emit({ type: "job", data: { ...done, phase: "done" } });
        return;
      }
    }
    this.#emit({ type: "job", data: { ...job } });
  }

  onUpstream(name: UpstreamName, up: boolean, detail: string): void {
    const before = this.#upstreams.get(name);
    const view: UpstreamView = up ? { up, version: detail } : { up, version: before?.version ?? null, reason: detail };
    this.#upstreams.set(name, view);
    if (before?.up === up && before.version === view.version) return;
    this.#emit({ type: "upstream", data: { name, ...view } });
  }

  // --- reading ---

  /** The whole document. `withClients`: include each request's client address (item 4's rule). */
  snapshot(withClients: boolean): StatusDoc {
    const now = this.#now();
    this.#pruneSpans(now);
    const { llm, image } = this.holders(withClients, now);
    const upstreams: StatusDoc["upstreams"] = {};
    for (const [name, v] of this.#upstreams) upstreams[name] = { ...v };
    return {
      version: this.#version,
      state: this.#state,
      state_since: new Date(this.#spans[this.#spans.length - 1]!.from).toISOString(),
      now,
      llm,
      image,
      lease: this.#leaseView(now),
      upstreams,
      recent: this.#recent.map((r) => ({ ...r })),
      history: this.#spans.map((s) => ({ ...s })),
    };
  }

  /**
   * Who holds the GPU and who waits. With `now`, ages are filled in; without, they are 0 and
   * only the `since` times tell them, so two calls compare equal while nothing changed.
   */
  holders(withClients: boolean, now?: number): Pick<StatusDoc, "llm" | "image"> {
    const requests: StatusDoc["llm"]["requests"] = [];
    let waiting = 0;
    let oldestWait = 0;
    for (const r of this.#requests.values()) {
      const age = now === undefined ? 0 : now - r.since;
      if (r.waiting) {
        waiting++;
        if (age > oldestWait) oldestWait = age;
      }
      const view: StatusDoc["llm"]["requests"][number] = { id: r.id, path: r.path, model: r.model ?? null, age_ms: age, waiting: r.waiting, since: r.since };
      if (withClients && r.client !== undefined) view.client = r.client;
      requests.push(view);
    }
    const lock = this.#lock.snapshot();
    const jobs = [...this.#jobs.values()].map((j) => ({ ...j, age_ms: now === undefined ? 0 : now - j.since }));
    // ComfyUI runs a session's jobs in the order they were queued: the oldest is the one running.
    const running = jobs.find((j) => j.phase === "running") ?? jobs[0] ?? null;
    return {
      llm: { inflight: lock.llmInflight, waiting, oldest_wait_ms: oldestWait, requests },
      image: { running, queued: lock.imageWaiting, session: jobs.length > 0 ? { jobs } : null },
    };
  }

  // --- GPU leases (status/steer.ts) ---

  onLease(e: LeaseEvent): void {
    this.#lease = e.event === "end" ? null : e.lease;
    if (this.#listeners.size > 0) this.#emit({ type: "lease", data: e });
  }

  #leaseView(now: number): StatusDoc["lease"] {
    const l = this.#lease;
    if (!l) return null;
    return { id: l.id, holder: l.holder, since: l.since, age_ms: now - l.since, expires_at: new Date(l.expires_at).toISOString(), expires_in_ms: Math.max(0, l.expires_at - now) };
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
