/**
 * Metrics by client class (issue 30): image jobs' waits for the GPU and the jobs served, LLM
 * requests' waits for a slot, and quota refusals, labelled `client_class` — one of FAIR_CLASSES, so
 * the label set is bounded (never a client's name, key or address). Fed by job events, the LLM
 * listeners' admissions and the quota's refusals.
 */
import type { ImageJobEvent } from "../jobs/events.ts";
import type { Registry } from "./metrics.ts";
import { LONG_BUCKETS } from "./turnstile-metrics.ts";

type Label = { client_class: string };
export type QuotaKind = "image" | "llm";
/** Which quota refused: too many at once (QUOTA_IMAGE_JOBS, QUOTA_LLM_REQUESTS) or GPU seconds used (QUOTA_GPU_SECONDS). */
export type QuotaReason = "concurrent" | "gpu_seconds";
const REASONS: readonly QuotaReason[] = ["concurrent", "gpu_seconds"];

export interface ClassMetrics {
  onJob(e: ImageJobEvent): void;
  /** An LLM request granted a slot after `waitedMs` (each try), its client's class as identify() tells it. */
  onLlmWait(cls: string, waitedMs: number): void;
  onQuotaRefused(cls: string, kind: QuotaKind, reason: QuotaReason): void;
}

export function createClassMetrics(registry: Registry, classes: readonly string[]): ClassMetrics {
  const known = new Set(classes);
  const initLabels = classes.map((client_class) => ({ client_class }));
  const wait = registry.histogram<Label>({
    name: "gpu_turnstile_image_wait_by_class_seconds",
    help: "Time an image job waited for the GPU, by its client's class (FAIR_CLASSES); a job that retries counts each wait.",
    labelNames: ["client_class"],
    buckets: LONG_BUCKETS,
    initLabels,
  });
  const served = registry.counter<Label>({
    name: "gpu_turnstile_image_jobs_by_class_total",
    help: "Image jobs granted the GPU, by their client's class (a job that retries counts once per grant).",
    labelNames: ["client_class"],
    initLabels,
  });
  const llmWait = registry.histogram<Label>({
    name: "gpu_turnstile_llm_wait_by_class_seconds",
    help: "Time an LLM request waited for a GPU slot, by its client's class (FAIR_CLASSES); a request that retries counts each wait; its count is the LLM requests served.",
    labelNames: ["client_class"],
    buckets: LONG_BUCKETS,
    initLabels,
  });
  const refused = registry.counter<Label & { kind: QuotaKind; reason: QuotaReason }>({
    name: "gpu_turnstile_quota_refusals_total",
    help: "Requests refused on arrival because their client was at its quota (429), by its class, kind (image jobs, LLM requests) and reason (concurrent: too many at once; gpu_seconds: its GPU time in QUOTA_GPU_WINDOW).",
    labelNames: ["client_class", "kind", "reason"],
    initLabels: classes.flatMap((client_class) => (["image", "llm"] as const).flatMap((kind) => REASONS.map((reason) => ({ client_class, kind, reason })))),
  });
  // A class not in the table (cannot happen from identify()) would make a new series: kept out.
  const label = (cls: string | undefined): Label | undefined => (cls !== undefined && known.has(cls) ? { client_class: cls } : undefined);
  return {
    onJob(e) {
      if (e.phase !== "acquired") return;
      const l = label(e.cls);
      if (!l) return;
      wait.observe(l, e.waitedMs / 1000);
      served.inc(l);
    },
    onLlmWait(cls, waitedMs) {
      const l = label(cls);
      if (l) llmWait.observe(l, waitedMs / 1000);
    },
    onQuotaRefused(cls, kind, reason) {
      const l = label(cls);
      if (l) refused.inc({ ...l, kind, reason });
    },
  };
}
