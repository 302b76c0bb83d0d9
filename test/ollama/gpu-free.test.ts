import { describe, expect, test } from "bun:test";
import { abilitiesOf, goFold, isCloudModel, keepAliveIsZero, noGpuReason } from "../../src/ollama/gpu-free.ts";
import { modelFieldWatcher } from "../../src/ollama/model-field.ts";

const TODAY = abilitiesOf("0.32.15");
const enc = new TextEncoder();

/** What the proxy asks: the body's bytes, with the first model the streaming scan found. */
function reason(path: string, body: string | object, can = TODAY) {
  const bytes = enc.encode(typeof body === "string" ? body : JSON.stringify(body));
  let scanned: string | undefined;
  modelFieldWatcher((m) => (scanned = m))(bytes);
  return noGpuReason(path, bytes, scanned, can)?.reason;
}

describe("cloud models use no local GPU, on every inference route", () => {
  test.each(["/api/chat", "/api/generate", "/api/embed", "/api/embeddings", "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/messages"])("%s", (path) => {
    expect(reason(path, { model: "gpt-oss:120b-cloud", messages: [{ role: "user", content: "hi" }] })).toBe("cloud");
    expect(reason(path, { messages: [], model: "kimi-k2:1t-cloud" })).toBe("cloud");
    expect(reason(path, { model: "gpt-oss:20b:cloud", input: "x" })).toBe("cloud");
    expect(reason(path, { model: "llama3.2", messages: [] })).toBeUndefined();
  });

  test.each([
    ["gpt-oss:120b-cloud", true],
    ["kimi-k2:1t-cloud", true],
    ["gpt-oss:cloud", true],
    ["GPT-OSS:120B-CLOUD", true],
    ["  gpt-oss:120b-cloud\n", true],
    ["team/model:cloud", true],
    // No tag: `-cloud` is part of the name, a local model.
    ["mymodel-cloud", false],
    ["my-cloud-model:latest", false],
    // Two sources are an error to Ollama (it then looks for a local model of that name).
    ["x:local:cloud", false],
    ["x:a-cloud:cloud", false],
    ["x:-cloud", false],
    [":cloud", false],
    // Go and JavaScript trim and fold non-ASCII differently: never a cloud name here.
    ["gpt-oss:120b-cloud\u0085", false],
    ["gpt-oss:120b-clouḍ", false],
    ["llama3.2:latest", false],
  ])("%s is cloud: %p", (name, cloud) => {
    expect(isCloudModel(name)).toBe(cloud);
  });

  test("every key Ollama reads as the model must name the cloud one", () => {
    // The /v1 middleware reads the exact key `model`, the handler any case of it: a local model in either loads.
    expect(reason("/v1/chat/completions", '{"model":"gpt-oss:120b-cloud","Model":"llama3.2","messages":[]}')).toBeUndefined();
    expect(reason("/api/chat", '{"Model":"llama3.2","model":"gpt-oss:120b-cloud","messages":[]}')).toBeUndefined();
    expect(reason("/api/chat", '{"model":"gpt-oss:120b-cloud","model":"llama3.2","messages":[]}')).toBeUndefined();
    expect(reason("/api/chat", '{"MODEL":"gpt-oss:120b-cloud","messages":[]}')).toBe("cloud");
    // The scan finds the cloud name first, the body is not one JSON object: Ollama would not read it as cloud.
    expect(reason("/api/chat", '{"model":"gpt-oss:120b-cloud"} {"model":"llama3.2"}')).toBeUndefined();
    expect(reason("/api/chat", { model: ["gpt-oss:120b-cloud"] })).toBeUndefined();
  });

  test("an Ollama that predates cloud names (or is not known yet) loads them like any name", () => {
    expect(reason("/api/chat", { model: "gpt-oss:120b-cloud", messages: [] }, abilitiesOf("0.17.5"))).toBeUndefined();
    expect(reason("/api/chat", { model: "gpt-oss:120b-cloud", messages: [] }, abilitiesOf(undefined))).toBeUndefined();
    expect(reason("/api/chat", { model: "gpt-oss:120b-cloud", messages: [] }, abilitiesOf("0.17.6"))).toBe("cloud");
    expect(reason("/api/chat", { model: "gpt-oss:120b-cloud", messages: [] }, abilitiesOf("0.33.0-rc2"))).toBe("cloud");
  });
});

describe("an unload frees the card; a load and anything carrying work wait", () => {
  test.each([
    ["/api/generate", { model: "llama3.2", keep_alive: 0 }],
    ["/api/generate", { model: "llama3.2", keep_alive: "0" }],
    ["/api/generate", { model: "llama3.2", keep_alive: "0s" }],
    ["/api/generate", { model: "llama3.2", keep_alive: "0m" }],
    ["/api/generate", { model: "llama3.2", keep_alive: "0h0m0.0s" }],
    ["/api/generate", { model: "llama3.2", keep_alive: 0.0, prompt: "" }],
    ["/api/generate", { model: "llama3.2", keep_alive: 0, prompt: null, images: [] }],
    ["/api/chat", { model: "llama3.2", keep_alive: 0 }],
    ["/api/chat", { model: "llama3.2", messages: [], keep_alive: "0s" }],
    ["/api/chat", { model: "llama3.2", messages: null, keep_alive: 0 }],
  ])("unload: %s %j", (path, body) => {
    expect(reason(path, body)).toBe("unload");
  });

  test.each([
    ["a load (keep_alive not 0)", "/api/generate", { model: "llama3.2", keep_alive: -1 }],
    ["a load (no keep_alive)", "/api/generate", { model: "llama3.2" }],
    ["a load (keep_alive null)", "/api/chat", { model: "llama3.2", keep_alive: null }],
    ["half a second", "/api/generate", { model: "llama3.2", keep_alive: 0.5 }],
    ["5m", "/api/generate", { model: "llama3.2", keep_alive: "5m" }],
    ["a prompt", "/api/generate", { model: "llama3.2", prompt: "write an essay", keep_alive: 0 }],
    ["messages", "/api/chat", { model: "llama3.2", messages: [{ role: "user", content: "hi" }], keep_alive: 0 }],
    ["images", "/api/generate", { model: "llava", images: ["iVBORw0KGgo="], keep_alive: 0 }],
    ["a prompt that is not a string", "/api/generate", { model: "llama3.2", prompt: 7, keep_alive: 0 }],
    ["a keep_alive of the wrong type", "/api/generate", { model: "llama3.2", keep_alive: true }],
    // Go binds keys case-insensitively, with its own folding: these are Ollama's prompt and messages.
    ["PROMPT", "/api/generate", '{"model":"llama3.2","keep_alive":0,"PROMPT":"write an essay"}'],
    ["Prompt after an empty prompt", "/api/generate", '{"model":"llama3.2","prompt":"","keep_alive":0,"Prompt":"write"}'],
    ["meſſages (long s folds to S)", "/api/chat", '{"model":"llama3.2","keep_alive":0,"meſſages":[{"role":"user","content":"hi"}]}'],
    ["a duplicate keep_alive", "/api/generate", '{"model":"llama3.2","keep_alive":0,"keep_alive":-1}'],
    ["trailing data (Go's decoder stops at the first value)", "/api/generate", '{"model":"llama3.2","keep_alive":0}{"prompt":"x"}'],
    ["a byte order mark (Go refuses it)", "/api/generate", '\ufeff{"model":"llama3.2","keep_alive":0}'],
    ["an OpenAI route (no unload there)", "/v1/chat/completions", { model: "llama3.2", messages: [], keep_alive: 0 }],
    ["/api/embed (it loads, then unloads)", "/api/embed", { model: "nomic-embed-text", input: [], keep_alive: 0 }],
    ["not an object", "/api/generate", "[0]"],
  ])("waits: %s", (_name, path, body) => {
    expect(reason(path, body)).toBeUndefined();
  });

  test("the Kelvin sign folds to K: \\u212aeep_alive is keep_alive to Go", () => {
    expect(reason("/api/generate", '{"model":"llama3.2","\u212aeep_alive":0}')).toBe("unload");
    expect(reason("/api/generate", '{"model":"llama3.2","\u212aeep_alive":0,"keep_alive":-1}')).toBeUndefined();
  });

  test("an Ollama before 0.3.11 loads the model to 'unload' it: that waits", () => {
    expect(reason("/api/generate", { model: "llama3.2", keep_alive: 0 }, abilitiesOf("0.3.10"))).toBeUndefined();
    expect(reason("/api/generate", { model: "llama3.2", keep_alive: 0 }, abilitiesOf("0.3.11"))).toBe("unload");
  });

  test("a padded body past 512 bytes is not parsed: it waits", () => {
    expect(reason("/api/generate", `{"model":"llama3.2",${" ".repeat(600)}"keep_alive":0}`)).toBeUndefined();
  });
});

describe("Go's rules, one by one", () => {
  test.each([
    [0, true],
    [-0, true],
    [1e-10, true],
    [1e-9, false],
    [0.5, false],
    [-1, false],
    ["0", true],
    ["+0", true],
    ["-0s", true],
    ["0.0s", true],
    [".0m", true],
    ["0ns", true],
    ["0µs", true],
    ["0s0ms", true],
    ["0.5ns", false], // Go truncates this to 0; waiting is the safe side
    ["1s", false],
    ["0x", false],
    ["s", false],
    ["", false],
    [null, false],
    [undefined, false],
  ])("keep_alive %p is zero: %p", (v, zero) => {
    expect(keepAliveIsZero(v)).toBe(zero);
  });

  test("goFold", () => {
    expect(goFold("keep_alive")).toBe("KEEP_ALIVE");
    expect(goFold("meſſages")).toBe("MESSAGES");
    expect(goFold("İmages")).toBe("IMAGES");
    expect(goFold("ımages")).toBe("IMAGES");
    expect(goFold("\u212aeep_alive")).toBe("KEEP_ALIVE");
    expect(goFold("modél")).toBe("MODéL");
  });

  test("abilitiesOf", () => {
    expect(abilitiesOf("0.32.15")).toEqual({ cloud: true, unload: true });
    expect(abilitiesOf("0.9.6")).toEqual({ cloud: false, unload: true });
    expect(abilitiesOf("0.2.8")).toEqual({ cloud: false, unload: false });
    expect(abilitiesOf("unknown")).toEqual({ cloud: false, unload: false });
    expect(abilitiesOf("1.0.0")).toEqual({ cloud: true, unload: true });
  });
});
