/**
 * COEXIST's wiring (issue 31): the co-residency controller built from the settings, its events as
 * log lines an operator can act on and as metrics (admissions, ejects). Off: nothing is built.
 */
import type { ComfyClient } from "../comfy/client.ts";
import type { Config } from "../config/types.ts";
import { type CoexistEvent, Coexistence } from "../jobs/coexist.ts";
import { parseModelList, parseSize } from "../jobs/coexist-rule.ts";
import { LearnedPeaks } from "../jobs/learned-peaks.ts";
import type { OllamaClient } from "../ollama/client.ts";
import type { CoexistStatus } from "../status/model.ts";
import type { Logger } from "./log.ts";
import type { Registry } from "./metrics.ts";
import { formatBytes } from "./units.ts";

type CoexistConfig = Pick<Config, "coexist" | "coexistModels" | "coexistMargin" | "coexistPollIntervalMs" | "probeTimeoutMs">;

export function startCoexist(
  config: CoexistConfig,
  deps: { ollama: OllamaClient | undefined; comfy: ComfyClient | undefined; registry: Registry; log: Pick<Logger, "info" | "warn"> },
): Coexistence | undefined {
  const { ollama, comfy, registry, log } = deps;
  if (!config.coexist) return undefined;
  if (!ollama || !comfy) {
    log.warn("COEXIST is on but needs both Ollama (OLLAMA_URL, LLM_KIND=ollama) and ComfyUI (COMFY_URL, IMAGE_KIND=comfyui); it stays off");
    return undefined;
  }
  const models = parseModelList(config.coexistModels);
  if (models.length === 0) log.warn("COEXIST is on but COEXIST_MODELS is empty: no model stays beside an image job");
  const admissions = registry.counter({
    name: "gpu_turnstile_coexist_admissions_total",
    help: "Models admitted to stay on the card beside an image session (COEXIST).",
  });
  const ejects = registry.counter({
    name: "gpu_turnstile_coexist_ejects_total",
    help: "Co-resident models unloaded during an image session: free memory fell below COEXIST_MARGIN, a joining workflow did not fit, or memory could not be read.",
  });
  const onEvent = (e: CoexistEvent): void => {
    switch (e.kind) {
      case "admitted":
        admissions.inc({});
        return log.info(
          `${e.model} (${formatBytes(e.sizeBytes)}) stays beside the image session: workflow ${e.workflow} peaks at ${formatBytes(e.peakBytes)} of ${formatBytes(e.totalBytes)}, ${formatBytes(e.headroomBytes)} to spare above COEXIST_MARGIN`,
          { model: e.model, workflow: e.workflow, size: e.sizeBytes, peak: e.peakBytes, headroom: e.headroomBytes, free: e.freeBytes, total: e.totalBytes },
        );
      case "refused":
        return log.info(`${e.model} unloaded for the image session: ${e.detail}`, { model: e.model, workflow: e.workflow, reason: e.reason });
      case "ejected":
        ejects.inc({});
        return log.warn(`ejected ${e.model} (${formatBytes(e.sizeBytes)}) from beside the image session: ${e.why}${e.error ? `; unload failed: ${e.error}` : ""}; its requests wait for the job`, {
          model: e.model,
          size: e.sizeBytes,
          free: e.freeBytes,
          margin: e.marginBytes,
          total: e.totalBytes,
          peak: e.peakBytes,
        });
      case "learned":
        return log.info(`learned peak ${formatBytes(e.peakBytes)} for workflow ${e.workflows.join(", ")}${e.rose ? " (higher than before)" : ""}`, { workflows: e.workflows, peak: e.peakBytes });
      case "exclusive":
        return log.warn(`workflow ${e.workflow} is exclusive only from now on: ${e.why}`, { workflow: e.workflow });
    }
  };
  return new Coexistence({
    options: {
      enabled: true,
      models,
      marginBytes: parseSize(config.coexistMargin),
      pollMs: config.coexistPollIntervalMs,
      readTimeoutMs: config.probeTimeoutMs,
    },
    ollama,
    comfy,
    peaks: new LearnedPeaks(),
    emit: onEvent,
  });
}

/** The controller's view as the status document spells it (all empty when it could not be built). */
export function coexistStatus(c: Coexistence | undefined): CoexistStatus {
  const v = c?.view() ?? {};
  const e = v.lastEject;
  return {
    model: v.model ?? null,
    headroom_bytes: v.headroomBytes ?? null,
    learned_peak_bytes: v.peakBytes ?? null,
    free_bytes: v.freeBytes ?? null,
    last_eject: e ? { at: e.at, model: e.model, why: e.why, free_bytes: e.freeBytes ?? null } : null,
  };
}
