/**
 * Turns what happens (requests, lock transitions, image-job phases, upstream health) into log
 * lines and metrics, in one place. Operators get one line per state transition and per job phase.
 */
import type { LockEvent } from "../lock/index.ts";
import type { ImageJobEvent } from "../jobs/events.ts";
import type { RequestObserver } from "../proxy/app.ts";
import type { Logger } from "./log.ts";
import { formatBytes, formatDuration, logRequest } from "./request-log.ts";
import type { IdleReason } from "../http/idle-watch.ts";
import { formatDuration as settingDuration } from "../config/duration.ts";
import type { TurnstileMetrics, Upstream } from "./turnstile-metrics.ts";

const ms = (v: number) => formatDuration(v);
const mib = (b: number | undefined) => (b === undefined ? "?" : `${(b / 1024 / 1024).toFixed(0)}MiB`);

const IDLE_WHY: Record<IdleReason, string> = {
  request_body: "the client's request body stopped arriving",
  no_answer: "the upstream sent no answer",
  upstream_stalled: "the upstream stopped sending mid-answer",
  client_not_reading: "the client stopped reading the answer",
};

export function requestObserver(log: Logger, metrics: TurnstileMetrics): RequestObserver {
  return {
    start(r) {
      if (r.class !== "internal" && log.enabled("info")) logRequest(log, "-->", r);
    },
    end(r) {
      metrics.requests.inc({ listener: r.listener, class: r.class, status: String(r.status) });
      if (r.class !== "internal" && log.enabled("info")) logRequest(log, "<--", r);
      // A truncated answer looks complete to many clients: the operator hears of it at the default level.
      if (r.cut?.by === "upstream") {
        log.warn(`${r.listener} answer cut off by the upstream`, {
          request: `${r.method} ${r.path}`,
          status: r.status,
          sent: formatBytes(r.bytes ?? 0),
          reason: r.cut.reason,
        });
      }
    },
    idle(listener, r) {
      metrics.llmAborted.inc({ reason: r.reason });
      log.warn(`${listener} request ended: ${IDLE_WHY[r.reason]} for LLM_IDLE_TIMEOUT (${settingDuration(r.timeoutMs)}); its GPU slot is free`, {
        request: `${r.method} ${r.path}`,
        reason: r.reason,
      });
    },
    busy(reason) {
      metrics.busy.inc({ reason });
      log.info(reason === "reject" ? "LLM request rejected: GPU busy with an image job" : "LLM request gave up waiting for the GPU", {
        reason,
      });
    },
    retry(listener, n) {
      metrics.upstreamRetries.inc({ upstream: listener });
      log.warn(`${listener} upstream unavailable, retrying in ${ms(n.delayMs)}`, {
        request: `${n.method} ${n.path}`,
        attempt: n.attempt,
        reason: n.reason,
      });
    },
    upstreamFailed(listener, r) {
      log.warn(`${listener} request failed`, { request: `${r.method} ${r.path}`, reason: r.reason });
    },
  };
}

export function lockLogger(log: Logger): (e: LockEvent) => void {
  return (e) => {
    if (e.type === "transition") {
      log.debug(`GPU ${e.from} -> ${e.to}`, {
        llm_inflight: e.snapshot.llmInflight,
        image_waiting: e.snapshot.imageWaiting,
        llm_waiting: e.snapshot.llmWaiting,
      });
    } else if (e.type === "abandoned") {
      log.debug(`${e.kind} waiter left after ${ms(e.waitedMs)}`, { lease: e.id });
    }
  };
}

export function jobObserver(log: Logger, metrics: TurnstileMetrics): (e: ImageJobEvent) => void {
  return (e) => {
    switch (e.phase) {
      case "acquired":
        if (e.joined) log.info(`image job ${e.jobId}: joined the image session after ${ms(e.waitedMs)}`, { job: e.jobId, wait: ms(e.waitedMs) });
        else log.info(`image job ${e.jobId}: GPU acquired after ${ms(e.waitedMs)}`, { job: e.jobId, wait: ms(e.waitedMs) });
        return;
      case "unloaded":
        metrics.unloadSeconds.observe({}, e.durationMs / 1000);
        if (e.complete) {
          log.info(`image job ${e.jobId}: Ollama empty after ${ms(e.durationMs)}`, {
            job: e.jobId,
            unloaded: e.models.join(",") || "-",
            unload: ms(e.durationMs),
          });
        } else {
          log.warn(`image job ${e.jobId}: Ollama unload not confirmed, continuing`, {
            job: e.jobId,
            tried: e.models.join(",") || "-",
            unload: ms(e.durationMs),
            reason: e.error,
          });
        }
        return;
      case "retrying":
        log.warn(`image job ${e.jobId}: ComfyUI unavailable, retrying in ${ms(e.delayMs)}`, { job: e.jobId, attempt: e.attempt, reason: e.reason });
        return;
      case "forwarded":
        log.info(`image job ${e.jobId}: ComfyUI answered ${e.status}`, {
          job: e.jobId,
          prompt_id: e.promptId ?? "-",
          forward: ms(e.durationMs),
        });
        return;
      case "finished": {
        metrics.jobSeconds.observe({}, e.durationMs / 1000);
        const fields = { job: e.jobId, prompt_id: e.promptId, job_time: ms(e.durationMs) };
        const prefix = `image job ${e.jobId}: prompt`;
        if (e.end === "timeout") log.warn(`${prefix} not seen finished within JOB_TIMEOUT`, fields);
        else if (e.end === "lost") log.warn(`${prefix} lost: ComfyUI no longer has it (restarted?)`, fields);
        else if (e.end === "interrupted") log.warn(`${prefix} ran past JOB_TIMEOUT and was interrupted`, fields);
        else if (e.end === "not_stopped") log.error(`${prefix} still running after /interrupt and another JOB_TIMEOUT; handing the GPU on anyway`, fields);
        else log.info(`${prefix} ${e.end}`, fields);
        return;
      }
      case "unstoppable":
        log.error(`image job ${e.jobId}: prompt did not stop within FREE_TIMEOUT of /interrupt; keeping the GPU up to ${ms(e.graceMs)} more`, {
          job: e.jobId,
          prompt_id: e.promptId,
        });
        return;
      case "freed": {
        metrics.freeSeconds.observe({}, e.durationMs / 1000);
        if (e.vramBefore !== undefined && e.vramAfter !== undefined) metrics.vramReclaimedBytes.set({}, Math.max(0, e.vramBefore - e.vramAfter));
        const fields = {
          job: e.jobId,
          prompt_id: e.promptId ?? "-",
          free: ms(e.durationMs),
          vram_before: mib(e.vramBefore),
          vram_after: mib(e.vramAfter),
        };
        if (e.released) log.info(`image job ${e.jobId}: ComfyUI memory released`, fields);
        else log.warn(`image job ${e.jobId}: ComfyUI memory release not confirmed`, { ...fields, reason: e.error });
        return;
      }
      case "released":
        metrics.imageJobs.inc({ outcome: e.outcome });
        log.info(e.gpuReleased ? `image job ${e.jobId}: GPU released (${e.outcome})` : `image job ${e.jobId}: done (${e.outcome}); its image session goes on`, {
          job: e.jobId,
          prompt_id: e.promptId ?? "-",
          held: ms(e.heldMs),
        });
        return;
      case "session_ended":
        metrics.imageSessions.inc({});
        metrics.sessionJobs.observe({}, e.jobs);
        log.info(`image session ended: ${e.jobs} job${e.jobs === 1 ? "" : "s"} in ${ms(e.durationMs)}`, { jobs: e.jobs });
        return;
      case "warmed":
        if (e.error) log.warn(`warm-up of ${e.model} failed`, { model: e.model, reason: e.error });
        else log.info(`warmed ${e.model} in ${ms(e.durationMs)}`, { model: e.model });
        return;
      case "warm_skipped":
        log.debug(`warm-up of ${e.model} skipped: ${e.reason}`);
        return;
    }
  };
}

export function upstreamHealthLogger(log: Logger, metrics: TurnstileMetrics) {
  const last = new Map<Upstream, boolean>();
  return (upstream: Upstream, up: boolean, detail: string) => {
    metrics.upstreamUp.set({ upstream }, up ? 1 : 0);
    const before = last.get(upstream);
    last.set(upstream, up);
    if (before === up) return;
    if (!up) log.warn(`${upstream} is down`, { reason: detail });
    else if (before === false) log.warn(`${upstream} recovered`, { version: detail });
    else log.info(`${upstream} is up`, { version: detail });
  };
}
