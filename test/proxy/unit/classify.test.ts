import { describe, expect, test } from "bun:test";
import { CLASSIFICATION, classify, routedPath } from "../../../src/proxy/classify.ts";

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
  // Ollama v0.14.3 to v0.32.5 on macOS (api-facts S1): an image model on the GPU ComfyUI shares.
  "/v1/images/generations",
  "/v1/images/edits",
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

describe("the path the upstream routes: percent-decoded, as gin and aiohttp do", () => {
  /** What the app does: classify the routed form of the path as received. */
  const classifyRaw = (listener: "ollama" | "comfy", raw: string) => classify(listener, "POST", routedPath(raw)!);

  test.each([
    ["/api/%63hat", "/api/chat"],
    ["/api/%63%68%61%74", "/api/chat"],
    ["/%61pi/generate", "/api/generate"],
    ["/v1/chat%2Fcompletions", "/v1/chat/completions"],
    ["/v1/chat%2fcompletions", "/v1/chat/completions"],
    ["/v1%2Fembeddings", "/v1/embeddings"],
    ["/api/x%2F..%2Fembed", "/api/embed"],
    ["/api/%2e/chat", "/api/chat"],
  ])("ollama: POST %s is the LLM route %s", (raw, routed) => {
    expect(routedPath(raw)).toBe(routed);
    expect(classifyRaw("ollama", raw)).toBe("llm");
  });

  test.each([
    ["/pr%6Fmpt", "/prompt"],
    ["/%70rompt", "/prompt"],
    ["/api%2Fprompt", "/api/prompt"],
    ["/api/pr%6fmpt", "/api/prompt"],
  ])("comfy: POST %s is the image route %s", (raw, routed) => {
    expect(routedPath(raw)).toBe(routed);
    expect(classifyRaw("comfy", raw)).toBe("image");
  });

  test.each(["/api/%43hat", "/api/chat%2F", "/api/chat%20", "/api/%2563hat", "/api/ch%C3%A4t", "/api/chat%ff", "/pr%4Fmpt"])(
    "a path that decodes to no locked route stays pass-through: %s",
    (raw) => {
      expect(classifyRaw("ollama", raw)).toBe("pass");
      expect(classifyRaw("comfy", raw)).toBe("pass");
    },
  );

  test("one decoding only, as the upstreams do: %2563 is a literal %63", () => {
    expect(routedPath("/api/%2563hat")).toBe("/api/%63hat");
  });

  test("a path without % is returned as it is (no copy, no work)", () => {
    const raw = "/api/chat";
    expect(routedPath(raw)).toBe(raw);
    expect(routedPath("//api/chat")).toBe("//api/chat");
  });

  test.each(["/api/%zzhat", "/api/chat%", "/api/chat%2", "/api/%g3hat", "/api/%3ghat", "/api/chat%00", "/%00/api/chat", "/api%2F%00"])(
    "invalid encoding is refused: %s",
    (raw) => {
      expect(routedPath(raw)).toBeUndefined();
    },
  );
});
