/**
 * The turnstile's metric set: one registry, typed handles for the code that counts things, and
 * gauges that read the lock's state at scrape time (so they can never drift from it).
 */
import { JOB_OUTCOMES, type JobOutcome } from "../jobs/events.ts";
import type { GpuState, LeaseKind } from "../lock/types.ts";
import type { Listener, RequestClass as ProxyRequestClass } from "../proxy/classify.ts";
import type { BusyReason } from "../proxy/llm-gate.ts";
import { IDLE_REASONS, type IdleReason } from "../http/idle-watch.ts";
import type { NoGpuReason } from "../ollama/gpu-free.ts";
import { Counter, Gauge, Histogram, PROMETHEUS_CONTENT_TYPE, Registry } from "./metrics.ts";

export type { BusyReason, GpuState, IdleReason, Listener };
export type LockKind = LeaseKind;
export type Upstream = "ollama" | "comfy";
/** A request's class, plus "internal" for what the turnstile answers itself (/healthz, /metrics). */
export type RequestClass = ProxyRequestClass | "internal";
export type ImageJobOutcome = JobOutcome;

export const GPU_STATES: readonly GpuState[] = ["idle", "llm", "image", "lease"];
export const IMAGE_JOB_OUTCOMES: readonly ImageJobOutcome[] = JOB_OUTCOMES;
export const BUSY_REASONS: readonly BusyReason[] = ["wait_timeout", "reject"];

/** Lock waits and ComfyUI jobs: 1 ms up to the 15 min defaults of LLM_WAIT_TIMEOUT / JOB_TIMEOUT. */
export const LONG_BUCKETS: readonly number[] = [
  0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900,
];
/** Unload and free: 10 ms up to past the 60 s UNLOAD_TIMEOUT default. */
export const SHORT_BUCKETS: readonly number[] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120];

export interface LockSnapshot {
  state: GpuState;
  llmInflight: number;
  imagePending: boolean;
}

/**
 * The least we need from the lock's event stream. Kept wide on purpose (plain strings, optional
 * fields) so the real lock's event union is assignable to it without importing the lock module.
 */
export interface LockEventLike {
  readonly type: string;
  readonly kind?: string;
  readonly waitedMs?: number;
}

export interface LockEventSource {
  // Method syntax: parameter bivariance lets a lock typed with a narrower event union fit.
  onEvent(listener: (e: LockEventLike) => void): unknown;
}

export interface TurnstileMetricsOptions {
  lockSnapshot: () => LockSnapshot;
  /** Enabled upstreams; their up/retry series exist from the start. */
  upstreams: readonly Upstream[];
  /** Shown in gpu_turnstile_build_info{version}. */
  version?: string;
  /** CARD_NAME: a `card` label on every series, so several cards' turnstiles can be told apart in one Prometheus. */
  card?: string;
}

export interface TurnstileMetrics {
  readonly registry: Registry;
  readonly contentType: string;
  /** Finished image jobs by outcome (every outcome present from the start, at 0). */
  readonly imageJobs: Counter<{ outcome: ImageJobOutcome }>;
  /** Image sessions that ran ComfyUI jobs (one GPU cycle in the image state each). */
  readonly imageSessions: Counter;
  /** ComfyUI jobs per image session. */
  readonly sessionJobs: Histogram;
  /** Seconds an acquisition waited for the lock; fed by attachLock(). */
  readonly lockWait: Histogram<{ kind: LockKind }>;
  /** Seconds from starting the Ollama unload until /api/ps was empty (or gave up). */
  readonly unloadSeconds: Histogram;
  /** Seconds from ComfyUI accepting the prompt until its history showed it finished (or timed out). */
  readonly jobSeconds: Histogram;
  /** Seconds from POST /free until the VRAM was seen released (or gave up). */
  readonly freeSeconds: Histogram;
  /** Bytes of torch-reserved VRAM that came back after the last image job's /free. */
  readonly vramReclaimedBytes: Gauge;
  /** Finished requests. `status` is the HTTP status as a string. */
  readonly requests: Counter<{ listener: Listener; class: RequestClass; status: string }>;
  /** LLM requests answered "busy". */
  readonly busy: Counter<{ reason: BusyReason }>;
  /** LLM exchanges ended by LLM_IDLE_TIMEOUT. */
  readonly llmAborted: Counter<{ reason: IdleReason }>;
  /** 1 when the last probe of the upstream succeeded, 0 before the first probe and after a failure. */
  readonly upstreamUp: Gauge<{ upstream: Upstream }>;
  /** Retried upstream attempts (connection refused, replayable 5xx, …). */
  readonly upstreamRetries: Counter<{ upstream: Upstream }>;
  /** LLM requests that passed without the lock because they use no local GPU. */
  readonly llmNoGpu: Counter<{ reason: NoGpuReason }>;
  /** Nested LLM requests served during an image job (LISTEN_OLLAMA_NESTED). */
  readonly nestedRequests: Counter;
  /** Nested requests cut because their image job ended and they ran on past FREE_TIMEOUT. */
  readonly nestedCut: Counter;
  /** Models found partly on the CPU after an image→LLM hand-off (/api/ps size_vram < size). */
  readonly partialOffload: Counter;
  /** Starts observing lock waits; returns whatever the lock's onEvent returned (e.g. an unsubscribe). */
  attachLock(lock: LockEventSource): unknown;
  render(): string;
}

export function createTurnstileMetrics(opts: TurnstileMetricsOptions): TurnstileMetrics {
  const registry = new Registry(opts.card === undefined ? undefined : { card: opts.card });
  const snapshot = opts.lockSnapshot;

  registry.gauge<{ state: GpuState }>({
    name: "gpu_turnstile_state",
    help: "Current GPU state: 1 for the current state, 0 for the others.",
    labelNames: ["state"],
    collect: (g) => {
      const current = snapshot().state;
      for (const s of GPU_STATES) g.set({ state: s }, s === current ? 1 : 0);
    },
  });
  registry.gauge({
    name: "gpu_turnstile_llm_inflight",
    help: "LLM requests currently holding the lock.",
    collect: (g) => g.set({}, snapshot().llmInflight),
  });
  registry.gauge({
    name: "gpu_turnstile_image_pending",
    help: "1 while an image job waits for the GPU (new LLM requests are held back meanwhile).",
    collect: (g) => g.set({}, snapshot().imagePending ? 1 : 0),
  });

  const imageJobs = registry.counter<{ outcome: ImageJobOutcome }>({
    name: "gpu_turnstile_image_jobs_total",
    help: "Image jobs by outcome.",
    labelNames: ["outcome"],
    initLabels: IMAGE_JOB_OUTCOMES.map((outcome) => ({ outcome })),
  });
  const imageSessions = registry.counter({
    name: "gpu_turnstile_image_sessions_total",
    help: "Image sessions that ran ComfyUI jobs (each: one Ollama unload, one /free).",
  });
  const sessionJobs = registry.histogram({
    name: "gpu_turnstile_image_session_jobs",
    help: "ComfyUI jobs per image session.",
    buckets: [1, 2, 3, 5, 10, 20, 50],
  });
  const lockWait = registry.histogram<{ kind: LockKind }>({
    name: "gpu_turnstile_lock_wait_seconds",
    help: "Time an acquisition waited for the GPU lock.",
    labelNames: ["kind"],
    buckets: LONG_BUCKETS,
    initLabels: [{ kind: "llm" }, { kind: "image" }],
  });
  const unloadSeconds = registry.histogram({
    name: "gpu_turnstile_unload_seconds",
    help: "Time to unload Ollama's models before an image job.",
    buckets: SHORT_BUCKETS,
  });
  const jobSeconds = registry.histogram({
    name: "gpu_turnstile_job_seconds",
    help: "Time from ComfyUI accepting a prompt until the job finished.",
    buckets: LONG_BUCKETS,
  });
  const freeSeconds = registry.histogram({
    name: "gpu_turnstile_free_seconds",
    help: "Time from POST /free until ComfyUI's VRAM was released.",
    buckets: SHORT_BUCKETS,
  });
  const vramReclaimedBytes = registry.gauge({
    name: "gpu_turnstile_vram_reclaimed_bytes",
    help: "Torch-reserved VRAM released after the last image job's /free.",
  });
  const requests = registry.counter<{ listener: Listener; class: RequestClass; status: string }>({
    name: "gpu_turnstile_requests_total",
    help: "Finished requests by listener, class and HTTP status.",
    labelNames: ["listener", "class", "status"],
  });
  const busy = registry.counter<{ reason: BusyReason }>({
    name: "gpu_turnstile_busy_total",
    help: "LLM requests answered busy because the GPU was held by an image job.",
    labelNames: ["reason"],
    initLabels: BUSY_REASONS.map((reason) => ({ reason })),
  });
  const llmAborted = registry.counter<{ reason: IdleReason }>({
    name: "gpu_turnstile_llm_aborted_total",
    help: "LLM requests ended because no byte moved for LLM_IDLE_TIMEOUT, by where they stood.",
    labelNames: ["reason"],
    initLabels: IDLE_REASONS.map((reason) => ({ reason })),
  });
  const upstreamUp = registry.gauge<{ upstream: Upstream }>({
    name: "gpu_turnstile_upstream_up",
    help: "1 if the last health probe of the upstream succeeded.",
    labelNames: ["upstream"],
    initLabels: opts.upstreams.map((upstream) => ({ upstream })),
  });
  const upstreamRetries = registry.counter<{ upstream: Upstream }>({
    name: "gpu_turnstile_upstream_retries_total",
    help: "Upstream requests retried after a connection failure or a replayable 5xx.",
    labelNames: ["upstream"],
    initLabels: opts.upstreams.map((upstream) => ({ upstream })),
  });
  const llmNoGpu = registry.counter<{ reason: NoGpuReason }>({
    name: "gpu_turnstile_llm_no_gpu_total",
    help: "LLM requests passed without the lock: a cloud model, or an unload.",
    labelNames: ["reason"],
    initLabels: [{ reason: "cloud" }, { reason: "unload" }],
  });
  const nestedRequests = registry.counter({
    name: "gpu_turnstile_nested_requests_total",
    help: "LLM requests on the nested listener served during an image job, sharing the card with it.",
  });
  const nestedCut = registry.counter({
    name: "gpu_turnstile_nested_cut_total",
    help: "Nested LLM requests cut because their image job ended and they ran on past FREE_TIMEOUT.",
  });
  const partialOffload = registry.counter({
    name: "gpu_turnstile_ollama_partial_offload_total",
    help: "Models found partly on the CPU (size_vram < size) after an image-to-LLM hand-off.",
  });
  registry
    .gauge<{ version: string }>({
      name: "gpu_turnstile_build_info",
      help: "Always 1; the version label carries the running build.",
      labelNames: ["version"],
    })
    .set({ version: opts.version ?? "dev" }, 1);

  return {
    registry,
    contentType: PROMETHEUS_CONTENT_TYPE,
    imageJobs,
    imageSessions,
    sessionJobs,
    lockWait,
    unloadSeconds,
    jobSeconds,
    freeSeconds,
    vramReclaimedBytes,
    requests,
    busy,
    llmAborted,
    upstreamUp,
    upstreamRetries,
    llmNoGpu,
    nestedRequests,
    nestedCut,
    partialOffload,
    attachLock(lock) {
      return lock.onEvent((e) => {
        if (e.type !== "acquired") return;
        if (e.kind !== "llm" && e.kind !== "image") return;
        const ms = e.waitedMs;
        if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) return;
        lockWait.observe({ kind: e.kind }, ms / 1000);
      });
    },
    render: () => registry.render(),
  };
}
