/**
 * Models that land partly on the CPU (api-facts S2). Ollama fits a model into the VRAM that is
 * free when it loads; if something still held memory at an image→LLM hand-off, part of the model
 * sits in system memory and every answer is slow until the model is unloaded. /api/ps shows it:
 * `size_vram < size`. After a hand-off the first model that loads is checked once.
 */
import type { LoadedModel, OllamaClient } from "./client.ts";

/** Models with part of themselves outside VRAM. */
export function partlyOnCpu(models: readonly LoadedModel[]): LoadedModel[] {
  return models.filter((m) => m.size > 0 && m.sizeVram < m.size);
}

/** `llama3.1:8b loaded 62% on GPU (3.1 GB of 5.0 GB), 38% on CPU: …` (sizes as `ollama ps` shows them, 1000-based). */
export function offloadWarning(m: LoadedModel): string {
  const gpu = Math.floor((m.sizeVram / m.size) * 100);
  return (
    `${m.name} loaded ${gpu}% on GPU (${gb(m.sizeVram)} of ${gb(m.size)}), ${100 - gpu}% on CPU: ` +
    "something still held VRAM at the hand-off; it stays slow until unloaded"
  );
}

function gb(bytes: number): string {
  return `${(bytes / 1e9).toFixed(1)} GB`;
}

/**
 * Armed by a hand-off from the image side; the next model load that succeeds (an LLM answer, a
 * warm-up) disarms it and reads /api/ps once, in the background. `report` hears of each model
 * found partly on the CPU.
 */
export class HandoffCheck {
  #armed = false;

  constructor(
    private readonly ollama: OllamaClient,
    private readonly report: (model: LoadedModel) => void,
    private readonly timeoutMs: number,
  ) {}

  get armed(): boolean {
    return this.#armed;
  }

  arm(): void {
    this.#armed = true;
  }

  /** The image side has the card again: what loads now (a nested request) is no hand-off's doing. */
  disarm(): void {
    this.#armed = false;
  }

  /** A model answered (so it is loaded). Resolves when the check, if one was due, is done; never rejects. */
  loaded(): Promise<void> {
    if (!this.#armed) return Promise.resolve();
    this.#armed = false;
    return this.ollama.ps(undefined, this.timeoutMs).then(
      (models) => {
        for (const m of partlyOnCpu(models)) this.report(m);
      },
      () => {
        // An unreadable /api/ps says nothing about where the model sits; the health probe reports Ollama down.
      },
    );
  }
}
