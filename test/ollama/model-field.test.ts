import { describe, expect, test } from "bun:test";
import { modelFieldWatcher } from "../../src/ollama/model-field.ts";

const enc = new TextEncoder();

/** Feeds `body` in chunks of `size` bytes (0 = one chunk) and returns every name reported. */
function scan(body: string | Uint8Array, size = 0): string[] {
  const bytes = typeof body === "string" ? enc.encode(body) : body;
  const found: string[] = [];
  const watch = modelFieldWatcher((m) => found.push(m));
  if (size === 0) watch(bytes);
  else for (let i = 0; i < bytes.length; i += size) watch(bytes.subarray(i, i + size));
  return found;
}

describe("the top-level model of a JSON body", () => {
  test.each([
    ["native chat", { model: "llama3.2", messages: [{ role: "user", content: "hi" }], stream: false }, ["llama3.2"]],
    ["model last (OpenAI SDKs put messages first)", { messages: [{ role: "user", content: "hi" }], model: "qwen2.5:7b" }, ["qwen2.5:7b"]],
    ["a nested model key is not it", { options: { model: "nope" }, tools: [{ model: "no" }], model: "m" }, ["m"]],
    ["a model in message text is not it", { messages: [{ content: '{"model":"evil"}' }], model: "m" }, ["m"]],
    ["a non-string model", { model: 7, prompt: "x" }, []],
    ["an object model", { model: { name: "x" }, prompt: "x" }, []],
    ["no model", { prompt: "hi" }, []],
    ["a registry name", { model: "registry.example:5000/team/model:q4" }, ["registry.example:5000/team/model:q4"]],
  ])("%s", (_name, body, expected) => {
    const text = JSON.stringify(body);
    expect(scan(text)).toEqual(expected);
    // The same answer however the body is cut into chunks, down to one byte at a time.
    for (const size of [1, 2, 3, 7]) expect(scan(text, size)).toEqual(expected);
  });

  test("whitespace and escapes as a client may send them", () => {
    const body = '\r\n {\n\t"prompt" : "say \\"model\\": \\\\",\n  "model"\t:\t"llama\\u0033.2"  }';
    expect(JSON.parse(body).model).toBe("llama3.2");
    for (const size of [0, 1, 2, 5]) expect(scan(body, size)).toEqual(["llama3.2"]);
  });

  test("keys are matched as Go's encoding/json does, in any case; the first one is reported", () => {
    expect(scan('{"Model":"a","x":1,"MODEL":"b","model":"c"}')).toEqual(["a"]);
    expect(scan('{"x":1,"MODEL":"b"}')).toEqual(["b"]);
    expect(scan('{"mod\\u0065l":"a"}')).toEqual(["a"]);
  });

  test("a key whose value is the string model is not a model key", () => {
    expect(scan('{"kind":"model","name":"x"}')).toEqual([]);
    expect(scan('{"a":["model","y"],"b":"model"}')).toEqual([]);
  });

  test("not an object, or broken: nothing, and nothing after the object ends", () => {
    expect(scan('["model","x"]')).toEqual([]);
    expect(scan("--boundary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper")).toEqual([]);
    expect(scan('{"model":"a"} {"model":"b"}')).toEqual(["a"]);
    expect(scan('{"model":')).toEqual([]);
    expect(scan('{"model":"unterminated')).toEqual([]);
  });

  test("an oversized key or name is skipped and the scan stays in step", () => {
    const long = "m".repeat(10_000);
    expect(scan(JSON.stringify({ [long]: "x", model: "a" }), 100)).toEqual(["a"]);
    expect(scan(JSON.stringify({ model: long, prompt: "model" }))).toEqual([]);
    expect(scan(JSON.stringify({ model: `${"\\".repeat(600)}`, next: "model" }), 3)).toEqual([]);
    expect(scan(JSON.stringify({ a: `x${"\\".repeat(601)}"`, model: "b" }), 3)).toEqual(["b"]);
  });

  test("big strings before the model (base64 images) are skipped whole", () => {
    const image = Buffer.alloc(300_000, 7).toString("base64");
    const body = JSON.stringify({ messages: [{ role: "user", content: "what is this?", images: [image] }], model: "llava" });
    expect(scan(body)).toEqual(["llava"]);
    expect(scan(body, 65_536)).toEqual(["llava"]);
  });
});
