import { describe, expect, test } from "bun:test";
import { CLASSIFICATION, classify } from "../../../src/proxy/classify.ts";

const LLM = [
  "/api/generate",
  "/api/chat",
  "/api/embed",
  "/api/embeddings",
  "/v1/chat/completions",
  "/v1/completions",
  "/v1/embeddings",
  "/v1/responses",
  "/v1/messages",
  "/v1/audio/transcriptions",
];
const IMAGE = ["/prompt", "/api/prompt"];

describe("ollama listener", () => {
  test.each(LLM)("POST %s takes the LLM lock", (path) => {
    expect(classify("ollama", "POST", path)).toBe("llm");
  });

  test.each(LLM.flatMap((p) => ["GET", "HEAD", "PUT", "DELETE", "OPTIONS", "post"].map((m) => [m, p] as const)))(
    "%s %s passes through",
    (method, path) => {
      expect(classify("ollama", method, path)).toBe("pass");
    },
  );

  test.each([
    "/api/chat/",
    "/API/chat",
    "/api/Chat",
    "/api/generated",
    "/api/generate/x",
    "/v1/chat/completions/",
    "/v1/chat/completions?x=1",
    "api/chat",
    "//api/chat",
    "/v1/models",
    "/api/tags",
    "/api/ps",
    "/api/pull",
    "/api/show",
    "/api/version",
    "/",
  ])("near-miss POST %s passes through", (path) => {
    expect(classify("ollama", "POST", path)).toBe("pass");
  });

  test("a URL with a query is classified by its pathname, as the app passes it", () => {
    const url = new URL("http://127.0.0.1:11434/v1/chat/completions?x=1");
    expect(classify("ollama", "POST", url.pathname)).toBe("llm");
  });

  test.each(IMAGE)("ComfyUI's POST %s on the Ollama listener does not take the image lock", (path) => {
    expect(classify("ollama", "POST", path)).toBe("pass");
  });

  test("a GET on /ws of the Ollama listener is plain pass-through", () => {
    expect(classify("ollama", "GET", "/ws")).toBe("pass");
  });
});

describe("comfy listener", () => {
  test.each(IMAGE)("POST %s takes the image lock", (path) => {
    expect(classify("comfy", "POST", path)).toBe("image");
  });

  test.each(IMAGE.flatMap((p) => ["GET", "HEAD", "DELETE", "OPTIONS"].map((m) => [m, p] as const)))(
    "%s %s passes through (queue status, CORS preflight)",
    (method, path) => {
      expect(classify("comfy", method, path)).toBe("pass");
    },
  );

  test.each(["/prompt/", "/PROMPT", "/api/prompt/", "/api/prompts", "/api/api/prompt", "/queue", "/free", "/interrupt", "/history"])(
    "near-miss POST %s passes through",
    (path) => {
      expect(classify("comfy", "POST", path)).toBe("pass");
    },
  );

  test.each(LLM)("Ollama's POST %s on the ComfyUI listener does not take the LLM lock", (path) => {
    expect(classify("comfy", "POST", path)).toBe("pass");
  });

  test("a plain GET on /ws (the websocket path, without an upgrade) is pass-through", () => {
    expect(classify("comfy", "GET", "/ws")).toBe("pass");
    expect(classify("comfy", "GET", "/api/ws")).toBe("pass");
  });
});

test("the exported table lists exactly the paths above", () => {
  expect([...CLASSIFICATION.llm].sort()).toEqual([...LLM].sort());
  expect([...CLASSIFICATION.image].sort()).toEqual([...IMAGE].sort());
});
