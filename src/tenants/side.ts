/**
 * What the composition root needs from the two picked drivers, wired once: each listener's
 * classification, the LLM side's proven hand-over (run when an image session opens), the
 * synchronous image job (for an image side whose request is the job) and the LLM side's restore
 * after an image turn. The lock only hears about it through its events; it stays pure.
 */
import { formatDuration } from "../config/duration.ts";
import type { Config } from "../config/types.ts";
import type { RequestTarget, RetryPolicy } from "../http/forward.ts";
import type { JobListener } from "../jobs/events.ts";
import type { ImageSessions } from "../jobs/session.ts";
import type { JobTracker } from "../jobs/tracker.ts";
import type { StartLog } from "../jobs/start-read.ts";
import type { LockEvent } from "../lock/index.ts";
import { handOver } from "./hand-over.ts";
import type { Tenants } from "./pick.ts";
import { AfterLoadCheck } from "./after-load.ts";
import { RestoreGate } from "./restore-gate.ts";
import { handleSyncJob, pickUpSyncAtStart, type SyncJobDeps } from "./sync-job.ts";
import type { LlmTenant, Released, WorkClass } from "./types.ts";
import { ComfyTenant } from "./comfyui.ts";
import { OllamaTenant } from "./ollama.ts";
import type { ComfyClient } from "../comfy/client.ts";
import type { ImageJobDeps, ImageLock } from "../jobs/image-job.ts";
import type { FairJobs } from "../jobs/fair-admission.ts";
import type { Nudges } from "../jobs/nudge.ts";
import type { HeldPrompts } from "../jobs/held-prompts.ts";
import type { JobStarts } from "../jobs/job-starts.ts";
import { PromptIds } from "../jobs/prompt-ids.ts";
import { SharedQueue } from "../jobs/queue-share.ts";

export interface TenantSideDeps {
  tenants: Tenants;
  lock: ImageLock & { onEvent(fn: (e: LockEvent) => void): () => void };
  config: Config;
  sessions: ImageSessions;
  tracker: JobTracker;
  emit: JobListener;
  retry: RetryPolicy;
  log: StartLog & { info(msg: string, fields?: Record<string, unknown>): void };
  /** Wakes ComfyUI job followers on a client's cancel (proxy/comfy-cancels.ts). */
  nudges: Nudges;
  /** ComfyUI's prompts not yet sent, shown in its /queue (jobs/held-prompts.ts). */
  held?: HeldPrompts;
  /** When ComfyUI's jobs began running, for a restart (jobs/job-starts.ts). */
  starts?: JobStarts;
  /** Fair turns and quotas of the image jobs, of every image kind (issue 30). */
  fair?: FairJobs;
}

export interface TenantSide {
  classifyLlm?: (method: string, routedPath: string) => WorkClass;
  classifyImage?: (method: string, routedPath: string) => WorkClass;
  /** Empties the LLM side, proven within UNLOAD_TIMEOUT (`keep`: COEXIST's model, Ollama only). Never throws. */
  releaseLlm?: (keep?: string) => Promise<Released>;
  syncJob?: (req: Request, url: RequestTarget, clientIp: string | undefined) => Promise<Response>;
  /** undefined when the LLM side has nothing to restore or owes nothing now. */
  restored?: () => Promise<void> | undefined;
  /** The sides whose server is not the default kind, by upstream name, for the log's words. */
  otherKinds: { ollama?: string; comfy?: string };
  /** At start: what an image side other than ComfyUI is doing, picked up (tenants/sync-job.ts). */
  pickUpAtStart?: () => Promise<void>;
  /** ComfyUI's asynchronous jobs (jobs/image-job.ts), when IMAGE_KIND is comfyui. */
  imageJob?: ImageJobDeps;
}

export function tenantSide(d: TenantSideDeps): TenantSide {
  const { llm, image } = d.tenants;
  const c = d.config;
  const releaseLlm =
    llm && ((keep?: string) => handOver(llm, { timeoutMs: c.unloadTimeoutMs, pollMs: c.unloadPollIntervalMs, callTimeoutMs: c.probeTimeoutMs, keep }));
  const side: TenantSide = {
    classifyLlm: llm && ((m, p) => llm.classify(m, p)),
    classifyImage: image && ((m, p) => image.classify(m, p)),
    releaseLlm,
    otherKinds: {
      ollama: llm && !(llm instanceof OllamaTenant) ? llm.label : undefined,
      comfy: image && !(image instanceof ComfyTenant) ? image.label : undefined,
    },
  };
  if (image) {
    const deps: SyncJobDeps = {
      sessions: d.sessions,
      image,
      releaseLlm,
      tracker: d.tracker,
      emit: d.emit,
      settings: { jobTimeoutMs: c.jobTimeoutMs, freeTimeoutMs: c.freeTimeoutMs, freePollIntervalMs: c.freePollIntervalMs, probeTimeoutMs: c.probeTimeoutMs, retry: d.retry },
      fair: d.fair,
    };
    side.syncJob = (req, url, clientIp) => handleSyncJob(req, url, clientIp, deps);
    if (!(image instanceof ComfyTenant)) side.pickUpAtStart = () => pickUpSyncAtStart(deps, d.log);
  }
  if (image instanceof ComfyTenant) side.imageJob = comfyJobs(image.client, d, releaseLlm);
  if (llm?.afterLoad) {
    const check = llm.afterLoad.bind(llm);
    new AfterLoadCheck(check, (finding) => d.log.warn(finding), c.probeTimeoutMs).watch(d.lock);
  }
  // WARM_MODEL loads an Ollama model after ComfyUI's jobs; said once rather than silently ignored.
  if (c.warmModel && (side.otherKinds.ollama || side.otherKinds.comfy)) {
    d.log.warn(`WARM_MODEL=${c.warmModel} is ignored: it warms Ollama after ComfyUI's jobs, and this turnstile runs ${llm?.label ?? "no LLM side"} with ${image?.label ?? "no image side"}`);
  }
  // A credential for a kind that is not in use: said once (never its value) rather than silently ignored.
  const credentials = [
    ["LMSTUDIO_TOKEN", c.lmstudioToken, c.llmKind === "lmstudio"],
    ["SWARMUI_SESSION", c.swarmuiSession, c.imageKind === "swarmui"],
    ["SWARMUI_TOKEN", c.swarmuiToken, c.imageKind === "swarmui"],
  ] as const;
  for (const [key, value, used] of credentials) {
    if (value && !used) d.log.warn(`${key} is set but ignored: it is for ${key.startsWith("LMSTUDIO") ? "LLM_KIND=lmstudio" : "IMAGE_KIND=swarmui"}, and this turnstile runs LLM_KIND=${c.llmKind}, IMAGE_KIND=${c.imageKind}`);
  }
  if (llm?.restore) {
    const label = llm.label;
    const gate = new RestoreGate((o) => llm.restore!(o), c.unloadTimeoutMs, (r) => {
      if (r.ok) d.log.info(`${label} restored after the image turn`, { restore_ms: Math.round(r.durationMs) });
      else d.log.warn(`${label} could not be restored within UNLOAD_TIMEOUT (${formatDuration(c.unloadTimeoutMs)}); sending the request anyway`, { reason: r.error });
    });
    d.lock.onEvent((e) => {
      if (e.type === "transition" && (e.to === "image" || e.to === "lease")) gate.released();
    });
    side.restored = () => gate.ready();
  }
  return side;
}

/** ComfyUI's job machinery (jobs/), as before the tenant contract; WARM_MODEL only with Ollama. */
function comfyJobs(comfy: ComfyClient, d: TenantSideDeps, releaseLlm: TenantSide["releaseLlm"]): ImageJobDeps {
  const c = d.config;
  return {
    lock: d.lock,
    sessions: d.sessions,
    comfy,
    ollama: d.tenants.llm instanceof OllamaTenant ? d.tenants.llm.client : undefined,
    releaseLlm,
    tracker: d.tracker,
    emit: d.emit,
    promptIds: new PromptIds(),
    queue: new SharedQueue(comfy),
    nudges: d.nudges,
    held: d.held,
    starts: d.starts,
    ...d.fair,
    settings: {
      probeTimeoutMs: c.probeTimeoutMs,
      jobTimeoutMs: c.jobTimeoutMs,
      historyPollIntervalMs: c.historyPollIntervalMs,
      freeTimeoutMs: c.freeTimeoutMs,
      freePollIntervalMs: c.freePollIntervalMs,
      promptCaptureLimit: c.promptCaptureLimit,
      warmModel: c.warmModel,
      warmTimeoutMs: c.warmTimeoutMs,
      retry: d.retry,
    },
  };
}

/**
 * One read of what an LLM side other than Ollama holds, told to the status page as /api/ps-shaped
 * models (name, size, size_vram), so the page and `status` show them as they show Ollama's.
 */
export function residentsReader(llm: LlmTenant, timeoutMs: number, told: (models: unknown[]) => void): () => Promise<void> {
  return async () => {
    const residents = await llm.resident({ signal: AbortSignal.timeout(timeoutMs) });
    told(residents.map((r) => ({ name: r.name, size: r.vramBytes ?? 0, size_vram: r.vramBytes ?? 0 })));
  };
}
