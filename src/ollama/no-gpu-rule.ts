/**
 * The Ollama listeners' rule for LLM bodies that use no local GPU (gpu-free.ts), with a
 * cloud-looking model confirmed by Ollama (remote-models.ts), and the pass-through watch that
 * forgets Ollama's answers when a model may have changed under its name.
 */
import type { OllamaClient } from "./client.ts";
import { type NoGpuReason, noGpuReason } from "./gpu-free.ts";
import { changesModels, RemoteModels, type RemoteModelsLog, showAsker } from "./remote-models.ts";

export interface NoGpuRule {
  decide(path: string, body: Uint8Array, scanned: string | undefined): NoGpuReason | undefined | Promise<NoGpuReason | undefined>;
  /**
   * For the listener's pass-through requests: a copy, create, pull or delete empties the kept
   * answers when it starts, when it is answered and when its answer ends (a create streams its
   * progress: the model under its name changes only at its end).
   */
  watchPass(method: string, path: string): { body(bytes: Uint8Array): void; answered(status: number): void; ended(): void } | undefined;
}

export function noGpuRule(ollama: OllamaClient, log: RemoteModelsLog, askTimeoutMs: number): NoGpuRule {
  const remote = new RemoteModels(showAsker(ollama.base, askTimeoutMs), log);
  return {
    decide(path, body, scanned) {
      const found = noGpuReason(path, body, scanned, ollama.abilities);
      if (found?.reason !== "cloud") return found?.reason;
      return remote.isRemote(found.model).then((yes) => (yes ? "cloud" : undefined));
    },
    watchPass(method, path) {
      if (!changesModels(method, path)) return undefined;
      remote.changed();
      const changed = () => remote.changed();
      return { body() {}, answered: changed, ended: changed };
    },
  };
}
