import { expect, test } from "bun:test";
import { offloadWarning, partlyOnCpu } from "../../src/ollama/offload.ts";

const model = (name: string, size: number, sizeVram: number) => ({ name, size, sizeVram });

test("a model with part of itself outside VRAM is named with its split", () => {
  expect(offloadWarning(model("llama3.1:8b", 5_000_000_000, 3_100_000_000))).toBe(
    "llama3.1:8b loaded 62% on GPU (3.1 GB of 5.0 GB), 38% on CPU: something still held VRAM at the hand-off; it stays slow until unloaded",
  );
  // Never "100% on GPU" for a model that is not wholly there.
  expect(offloadWarning(model("m", 1000, 999))).toContain("99% on GPU");
  expect(offloadWarning(model("m", 1000, 0))).toContain("0% on GPU (0.0 GB of 0.0 GB), 100% on CPU");
});

test("only models with size_vram < size are partly on the CPU", () => {
  const all = [model("whole", 10, 10), model("split", 10, 4), model("cpu", 10, 0), model("unknown size", 0, 0)];
  expect(partlyOnCpu(all).map((m) => m.name)).toEqual(["split", "cpu"]);
});
