import { expect, test } from "bun:test";
import { MAX_ROUTED, ModelMemory } from "../../src/ollama/model-memory.ts";

test("remembers routed models until /api/ps is seen empty", () => {
  const m = new ModelMemory();
  m.routed("llama3.2");
  m.routed("qwen2.5:7b");
  expect(m.suspects()).toEqual(["llama3.2", "qwen2.5:7b"]);
  m.listed(["qwen2.5:7b"]);
  // A non-empty list proves nothing about the others: they stay.
  expect(m.suspects()).toEqual(["qwen2.5:7b", "llama3.2"]);
  m.listed([]);
  expect(m.suspects()).toEqual([]);
  m.routed("phi3");
  expect(m.suspects()).toEqual(["phi3"]);
});

test("the last good /api/ps list stays a suspect until a later one replaces it", () => {
  const m = new ModelMemory();
  m.listed(["a:latest", "b:7b"]);
  expect(m.suspects()).toEqual(["a:latest", "b:7b"]);
  m.listed(["b:7b"]);
  expect(m.suspects()).toEqual(["b:7b"]);
});

test("a name and its :latest form are one model", () => {
  const m = new ModelMemory();
  m.listed(["llama3.2:latest"]);
  m.routed("llama3.2");
  m.routed("host:5000/team/model");
  expect(m.suspects()).toEqual(["llama3.2:latest", "host:5000/team/model"]);
});

test("routed names are bounded, the oldest forgotten first; a repeat counts as recent", () => {
  const m = new ModelMemory();
  m.routed("keep");
  for (let i = 0; i < MAX_ROUTED * 10; i++) {
    m.routed(`made-up-${i}`);
    m.routed("keep");
  }
  const s = m.suspects();
  expect(s).toHaveLength(MAX_ROUTED);
  expect(s).toContain("keep");
  expect(s).toContain(`made-up-${MAX_ROUTED * 10 - 1}`);
  expect(s).not.toContain("made-up-0");
});

test("a name Ollama answered 404 for is forgotten, so made-up names cannot push out a real one", () => {
  const m = new ModelMemory();
  m.routed("llama3.2");
  for (let i = 0; i < MAX_ROUTED * 2; i++) {
    m.routed(`made-up-${i}`);
    m.unknown(`made-up-${i}`);
  }
  expect(m.suspects()).toEqual(["llama3.2"]);
});
