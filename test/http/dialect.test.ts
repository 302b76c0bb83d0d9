import { describe, expect, test } from "bun:test";
import { dialectFor, errorBody, errorResponse } from "../../src/http/dialect.ts";

describe("dialectFor", () => {
  test.each([
    ["/api/chat", "ollama"],
    ["/api/generate", "ollama"],
    ["/v1/chat/completions", "openai"],
    ["/v1/messages", "openai"],
    ["/v1", "openai"],
    ["/v1x/chat", "ollama"],
    ["/", "ollama"],
  ] as const)("ollama listener %s → %s", (path, d) => {
    expect(dialectFor("ollama", path)).toBe(d);
  });

  test.each(["/prompt", "/api/prompt", "/v1/chat/completions"])("comfy listener %s → comfy", (path) => {
    expect(dialectFor("comfy", path)).toBe("comfy");
  });

  test("the image listener speaks its image tenant's dialect; the LLM listeners keep theirs", () => {
    expect(dialectFor("comfy", "/sdapi/v1/txt2img", "a1111")).toBe("a1111");
    expect(dialectFor("comfy", "/API/GenerateText2Image", "swarmui")).toBe("swarmui");
    expect(dialectFor("ollama", "/v1/chat/completions", "a1111")).toBe("openai");
  });

  test("AUTOMATIC1111's and SwarmUI's clients find the message as a string where they read it", () => {
    const e = { status: 504, type: "upstream_timeout", message: "gpu-turnstile: no answer within JOB_TIMEOUT" };
    expect(errorBody("a1111", e)).toEqual({ error: "upstream_timeout", detail: e.message, body: "", errors: e.message });
    expect(errorBody("swarmui", e)).toEqual({ error_id: "upstream_timeout", error: e.message });
  });
});

describe("error bodies", () => {
  const e = { status: 503, message: "GPU busy", type: "gpu_busy", headers: { "retry-after": "5" } };

  test("Ollama: a plain string error", () => {
    expect(errorBody("ollama", e)).toEqual({ error: "GPU busy" });
  });

  test("OpenAI: message, type, param and code", () => {
    expect(errorBody("openai", e)).toEqual({ error: { message: "GPU busy", type: "gpu_busy", param: null, code: null } });
  });

  test("ComfyUI: its error object plus node_errors", () => {
    expect(errorBody("comfy", e)).toEqual({
      error: { type: "gpu_busy", message: "GPU busy", details: "", extra_info: {} },
      node_errors: {},
    });
  });

  test.each(["ollama", "openai", "comfy"] as const)("%s response carries the status, JSON type, extra headers and body", async (d) => {
    const res = errorResponse(d, e);
    expect(res.status).toBe(503);
    expect(res.headers.get("content-type")).toBe("application/json; charset=utf-8");
    expect(res.headers.get("retry-after")).toBe("5");
    expect(await res.json()).toEqual(errorBody(d, e) as object);
  });

  test("a reply without extra headers has only the content type", () => {
    const res = errorResponse("ollama", { status: 429, message: "m", type: "t" });
    expect(res.status).toBe(429);
    expect([...res.headers.keys()]).toEqual(["content-type"]);
  });
});
