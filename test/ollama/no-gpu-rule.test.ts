/**
 * The listeners' no-GPU rule against the simulated Ollama: a cloud-looking name passes only on
 * Ollama's word, and a model-changing request that passes through forgets the kept answers at its
 * start and again when its (streamed) answer ends — when a create's new model is in place.
 */
import { afterEach, expect, test } from "bun:test";
import { OllamaClient } from "../../src/ollama/client.ts";
import { noGpuRule } from "../../src/ollama/no-gpu-rule.ts";
import { type OllamaSim, startOllamaSim } from "../../src/sim/ollama.ts";

let sim: OllamaSim | undefined;
afterEach(async () => {
  await sim?.stop();
  sim = undefined;
});

const chat = (model: string) => new TextEncoder().encode(JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] }));

test("Ollama's word decides; a model-changing request forgets it when it starts and when its answer ends", async () => {
  sim = await startOllamaSim({ loadMs: 1, unloadMs: 1, tokenDelayMs: 1 });
  const ollama = new OllamaClient(new URL(sim.url), 1000);
  await ollama.version();
  const rule = noGpuRule(ollama, { warn() {}, debug() {} }, 1000);
  const decide = (model: string) => rule.decide("/api/chat", chat(model), model);
  const copy = (source: string, destination: string) => fetch(`${sim!.url}/api/copy`, { method: "POST", body: JSON.stringify({ source, destination }) });

  expect(await decide("gpt-oss:120b-cloud")).toBe("cloud");
  expect(await decide("llama3.2")).toBeUndefined();
  expect(rule.watchPass("GET", "/api/tags")).toBeUndefined();

  // A create runs (its progress streams); Ollama still says remote meanwhile, and that is kept.
  const create = rule.watchPass("POST", "/api/create")!;
  expect(await decide("gpt-oss:120b-cloud")).toBe("cloud");
  // The create's model takes the name at its end, behind the kept answer.
  expect((await copy("llama3.2", "gpt-oss:120b-cloud")).status).toBe(200);
  expect(await decide("gpt-oss:120b-cloud")).toBe("cloud");
  create.ended();
  expect(await decide("gpt-oss:120b-cloud")).toBeUndefined();
});
