/**
 * Turns what happens (requests, lock transitions, image-job phases, upstream health) into log
 * lines and metrics, in one place. Which lines an operator sees at which level is in SPEC.md
 * ("Logging"): at the default level, one summary per image job, upstream health changes, and
 * whatever went wrong; at info, every request and every job phase; at debug, every GPU transition.
 */
import type { LockEvent } from "../lock/index.ts";
import type { ImageJobEvent } from "../jobs/events.ts";
import type { RequestObserver } from "../proxy/app.ts";
import type { Logger } from "./log.ts";
import { logRequest } from "./request-log.ts";
import type { IdleReason } from "../http/idle-watch.ts";
import { formatDuration as settingDuration } from "../config/duration.ts";
import type { TurnstileMetrics, Upstream } from "./turnstile-metrics.ts";

/** Durations in log fields: whole-ish milliseconds (a µs is noise to an operator and to a parser). */
const msField = (v: number) => Math.round(v * 10) / 10;

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
      if (r.noGpu) metrics.llmNoGpu.inc({ reason: r.noGpu });
      if (r.nested) {
        metrics.nestedRequests.inc({});
        // The one exception to "one tenant at a time", made by the operator: said at the default level.
        log.notice("nested LLM request served during an image job (it shared the card with the job)", {
          request: `${r.method} ${r.path}`,
          model: r.model,
          status: r.status,
          duration_ms: msField(r.durationMs),
        });
      }
      if (r.class !== "internal" && log.enabled("info")) logRequest(log, "<--", r);
      // A truncated answer looks complete to many clients: the operator hears of it at the default level.
      if (r.cut?.by === "upstream") {
        log.warn(`${r.listener} answer cut off by the upstream`, {
          request: `${r.method} ${r.path}`,
          status: r.status,
          sent_bytes: r.bytes ?? 0,
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
      metrics.upstreamRetries.inc({ upstream: listener === "comfy" ? "comfy" : "ollama" });
      log.warn(`${listener} upstream unavailable, retrying`, {
        request: `${n.method} ${n.path}`,
        attempt: n.attempt,
        delay_ms: msField(n.delayMs),
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
      log.debug(`${e.kind} waiter left`, { lease: e.id, wait_ms: msField(e.waitedMs) });
    }
  };
}

/** What one image job's summary line reports, gathered from its phases. */
interface JobTimes {
  promptId?: string;
  waitedMs: number;
  unloadMs: number;
  jobMs?: number;
  freeMs?: number;
}

/** `names`: the two sides' servers as the log names them (the picked drivers' labels). */
export function jobObserver(log: Logger, metrics: TurnstileMetrics, names: { llm?: string; image?: string } = {}): (e: ImageJobEvent) => void {
  const llm = names.llm ?? "Ollama";
  const image = names.image ?? "ComfyUI";
  // Jobs between their first grant and their end; a job that retried adds up its waits and unloads.
  const jobs = new Map<number, JobTimes>();
  let liedTold = false;
  const times = (jobId: number): JobTimes => {
    let t = jobs.get(jobId);
    if (!t) jobs.set(jobId, (t = { waitedMs: 0, unloadMs: 0 }));
    return t;
  };
  return (e) => {
    switch (e.phase) {
      case "acquired":
        times(e.jobId).waitedMs += e.waitedMs;
        log.info(e.joined ? `image job ${e.jobId}: joined the image session` : `image job ${e.jobId}: GPU acquired`, { job: e.jobId, wait_ms: msField(e.waitedMs) });
        return;
      case "unloaded":
        metrics.unloadSeconds.observe({}, e.durationMs / 1000);
        times(e.jobId).unloadMs += e.durationMs;
        if (e.notRunning) {
          log.info(`image job ${e.jobId}: ${llm} not running (refused on this machine), nothing to unload`, { job: e.jobId, reason: e.notRunning });
        } else if (e.complete) {
          log.info(`image job ${e.jobId}: ${llm} empty`, { job: e.jobId, unloaded: e.models.join(",") || null, unload_ms: msField(e.durationMs) });
        } else {
          log.warn(`image job ${e.jobId}: ${llm} unload not confirmed, continuing`, {
            job: e.jobId,
            tried: e.models.join(",") || null,
            unload_ms: msField(e.durationMs),
            reason: e.error,
          });
        }
        return;
      case "retrying":
        log.warn(`image job ${e.jobId}: ${image} unavailable, retrying`, { job: e.jobId, attempt: e.attempt, delay_ms: msField(e.delayMs), reason: e.reason });
        return;
      case "received":
        log.debug(`image job ${e.jobId}: ${e.work ? e.promptId : "/prompt"} received`, { job: e.jobId, prompt_id: e.promptId, minted: e.minted, client_id: e.clientId });
        return;
      case "forwarded":
        if (e.answeredPromptId) {
          log.warn(`image job ${e.jobId}: ComfyUI answered with another prompt_id than the one sent; following both`, { job: e.jobId, sent: e.promptId, answered: e.answeredPromptId });
        }
        if (e.promptId) times(e.jobId).promptId = e.promptId;
        log.info(`image job ${e.jobId}: ${image} answered ${e.status}`, { job: e.jobId, prompt_id: e.promptId ?? null, forward_ms: msField(e.durationMs) });
        return;
      case "adopted":
        times(e.jobId).promptId = e.promptId;
        return;
      case "finished": {
        metrics.jobSeconds.observe({}, e.durationMs / 1000);
        times(e.jobId).jobMs = e.durationMs;
        const fields = { job: e.jobId, prompt_id: e.promptId, job_ms: msField(e.durationMs) };
        // The tenant's own word for the job: ComfyUI's prompt, A1111's txt2img, SwarmUI's GenerateText2Image.
        const prefix = `image job ${e.jobId}: ${e.work ?? "prompt"}`;
        if (e.end === "timeout") log.warn(`${prefix} not seen finished within JOB_TIMEOUT`, fields);
        else if (e.end === "lost") log.warn(`${prefix} lost: ComfyUI no longer has it (restarted?)`, fields);
        else if (e.end === "interrupted") log.warn(`${prefix} ran past JOB_TIMEOUT and was interrupted`, fields);
        else if (e.end === "not_stopped") log.error(`${prefix} still running after /interrupt and another JOB_TIMEOUT; handing the GPU on anyway`, fields);
        else log.info(`${prefix} ${e.end}`, fields);
        return;
      }
      case "unstoppable":
        log.error(`image job ${e.jobId}: prompt did not stop within FREE_TIMEOUT of /interrupt; keeping the GPU longer`, {
          job: e.jobId,
          prompt_id: e.promptId,
          grace_ms: msField(e.graceMs),
        });
        return;
      case "still_busy":
        log.warn(`image job ${e.jobId}: ComfyUI's memory is not back and its queue still holds ${e.jobs} job(s); keeping the GPU until it is empty`, {
          job: e.jobId,
          prompt_ids: e.promptIds.join(","),
          bound_ms: msField(e.boundMs),
        });
        return;
      case "freed": {
        metrics.freeSeconds.observe({}, e.durationMs / 1000);
        if (e.vramBefore !== undefined && e.vramAfter !== undefined) metrics.vramReclaimedBytes.set({}, Math.max(0, e.vramBefore - e.vramAfter));
        times(e.jobId).freeMs = e.durationMs;
        const fields = {
          job: e.jobId,
          prompt_id: e.promptId ?? null,
          free_ms: msField(e.durationMs),
          vram_before_bytes: e.vramBefore,
          vram_after_bytes: e.vramAfter,
          device: e.shared,
        };
        if (e.released && e.shared) log.info(`image job ${e.jobId}: ${image} freed (its memory is the system's: /free answered, queue empty)`, fields);
        else if (e.released) log.info(`image job ${e.jobId}: ${image} memory released`, fields);
        else if (e.lied) {
          // Said once at warn (an operator reads it once): every image turn's end then waits FREE_TIMEOUT.
          const line = `image job ${e.jobId}: the image server answered its release as done but kept the memory; the card was held up to FREE_TIMEOUT and handed on`;
          if (liedTold) log.info(line, { ...fields, reason: e.error });
          else log.warn(line, { ...fields, reason: e.error });
          liedTold = true;
        } else log.warn(`image job ${e.jobId}: ${image} memory release not confirmed`, { ...fields, reason: e.error });
        return;
      }
      case "released": {
        metrics.imageJobs.inc({ outcome: e.outcome });
        const t = jobs.get(e.jobId) ?? { waitedMs: 0, unloadMs: 0 };
        jobs.delete(e.jobId);
        // The one line a quiet service writes per image job (SPEC.md, "Logging").
        log.notice(`image job ${e.jobId} ${e.outcome}${e.gpuReleased ? "; GPU released" : "; its image session goes on"}`, {
          job: e.jobId,
          prompt_id: e.promptId ?? t.promptId ?? null,
          outcome: e.outcome,
          wait_ms: msField(t.waitedMs),
          unload_ms: msField(t.unloadMs),
          job_ms: t.jobMs === undefined ? undefined : msField(t.jobMs),
          free_ms: t.freeMs === undefined ? undefined : msField(t.freeMs),
          held_ms: msField(e.heldMs),
          reason: e.reason,
        });
        return;
      }
      case "session_ended": {
        metrics.imageSessions.inc({});
        metrics.sessionJobs.observe({}, e.jobs);
        // A one-job session's end says nothing its job's summary did not.
        const fields = { jobs: e.jobs, session_ms: msField(e.durationMs) };
        if (e.jobs > 1) log.notice(`image session ended after ${e.jobs} jobs; GPU released`, fields);
        else log.debug("image session ended", fields);
        return;
      }
      case "warmed":
        if (e.error) log.warn(`warm-up of ${e.model} failed`, { model: e.model, reason: e.error });
        else log.info(`warmed ${e.model}`, { model: e.model, warm_ms: msField(e.durationMs) });
        return;
      case "warm_skipped":
        log.debug(`warm-up of ${e.model} skipped: ${e.reason}`);
        return;
    }
  };
}

/** `servers`: a side's server when it is not the default kind (vLLM on the "ollama" side), named in the lines. */
export function upstreamHealthLogger(log: Logger, metrics: TurnstileMetrics, servers: Partial<Record<Upstream, string>> = {}) {
  const last = new Map<Upstream, boolean>();
  return (upstream: Upstream, up: boolean, detail: string) => {
    metrics.upstreamUp.set({ upstream }, up ? 1 : 0);
    const before = last.get(upstream);
    last.set(upstream, up);
    if (before === up) return;
    const name = servers[upstream] ? `${servers[upstream]} (${upstream === "comfy" ? "image" : "LLM"} side)` : upstream;
    if (!up) log.warn(`${name} is down`, { reason: detail });
    else if (before === false) log.warn(`${name} recovered`, { version: detail });
    else log.notice(`${name} is up`, { version: detail });
  };
}
