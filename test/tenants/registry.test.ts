/** Every kind the settings accept has a place in the registry; a kind without a driver yet is a start error naming its setting. */
import { expect, test } from "bun:test";
import { IMAGE_KINDS, LLM_KINDS } from "../../src/config/tenant-kinds.ts";
import { driverFor, IMAGE_DRIVERS, LLM_DRIVERS } from "../../src/tenants/registry.ts";

test("the registry has a row for every kind, and each driver says its own kind", () => {
  expect(Object.keys(LLM_DRIVERS).sort()).toEqual([...LLM_KINDS].sort());
  expect(Object.keys(IMAGE_DRIVERS).sort()).toEqual([...IMAGE_KINDS].sort());
  for (const [kind, d] of [...Object.entries(LLM_DRIVERS), ...Object.entries(IMAGE_DRIVERS)]) if (d) expect(d.kind).toBe(kind);
  expect(driverFor("LLM_KIND", LLM_DRIVERS, "ollama").label).toBe("Ollama");
  expect(driverFor("IMAGE_KIND", IMAGE_DRIVERS, "comfyui").label).toBe("ComfyUI");
});

test("a kind without a driver names its setting", () => {
  const table = { ollama: undefined } as Record<string, undefined>;
  expect(() => driverFor("LLM_KIND", table, "ollama")).toThrow("LLM_KIND=ollama: this build has no driver for it yet");
});
