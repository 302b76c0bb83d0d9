/**
 * One image kind that answers its generation request as the job (a1111, swarmui) paired with the
 * simulated Ollama on one simulated card, the real turnstile in front: what the files of this
 * folder start, and stop after each test.
 */
import { SimGpu } from "../../../src/sim/gpu.ts";
import { IMAGE_KIND_SIMS, type ImageSimHandle, type ImageSimOptions } from "../../../src/sim/image-kinds.ts";
import { type OllamaSim, startOllamaSim } from "../../../src/sim/ollama.ts";
import { startTestTurnstile, type TestTurnstile } from "../../support/turnstile.ts";

export type SyncKind = "a1111" | "swarmui";

export interface Rig {
  gpu: SimGpu;
  ollama: OllamaSim;
  image: ImageSimHandle;
  t: TestTurnstile;
}

/** `o` over the default simulator timings (an 80 ms job), `env` over the turnstile's settings. */
export async function startRig(kind: SyncKind, o: ImageSimOptions = {}, env: Record<string, string> = {}): Promise<Rig> {
  const gpu = new SimGpu();
  const ollama = await startOllamaSim({ gpu, loadMs: 20, unloadMs: 20, tokenDelayMs: 2, tokens: 4 });
  const image = await IMAGE_KIND_SIMS[kind].start(gpu, { jobMs: 80, loadMs: 30, reloadMs: 10, unloadMs: 20, ...o });
  const t = startTestTurnstile({ OLLAMA_URL: ollama.url, COMFY_URL: image.url, IMAGE_KIND: kind, ...env });
  return { gpu, ollama, image, t };
}

export async function stopRig(r: Rig | undefined): Promise<void> {
  if (!r) return;
  await r.t.close();
  await Promise.all([r.ollama.stop(), r.image.stop()]);
}
