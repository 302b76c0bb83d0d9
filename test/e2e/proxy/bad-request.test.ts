/**
 * Client mistakes at the front door, sent through raw sockets (fetch cannot send them): a missing
 * or unusable Host, repeated Host or Content-Length fields. /healthz and /metrics answer whatever
 * the Host; a proxied request gets a 400 in its dialect, never a 500; nothing reaches an upstream.
 */
import { describe, expect, test } from "bun:test";
import { probedStackForFile, rawHttp } from "./helpers.ts";

const s = probedStackForFile();

/** Host field lines as sent; null = none at all (HTTP/1.0). */
const BAD_HOSTS: [what: string, hostLines: string, version: string][] = [
  ["HTTP/1.0 without Host", "", "HTTP/1.0"],
  ["Host: a b", "Host: a b\r\n", "HTTP/1.1"],
  ["Host: [zz]", "Host: [zz]\r\n", "HTTP/1.1"],
  ["Host: x:99999", "Host: x:99999\r\n", "HTTP/1.1"],
  ["Host: x@y", "Host: x@y\r\n", "HTTP/1.1"],
  ["an empty Host", "Host: \r\n", "HTTP/1.1"],
];

const get = (path: string, hostLines: string, version: string) => `GET ${path} ${version}\r\n${hostLines}Connection: close\r\n\r\n`;

describe.each(BAD_HOSTS)("%s", (_what, hostLines, version) => {
  test("/healthz and /metrics answer (an nc or HTTP/1.0 health check works)", async () => {
    for (const base of [s().t.ollamaUrl, s().t.comfyUrl]) {
      const health = await rawHttp(base, get("/healthz", hostLines, version));
      expect(health.status).toBe(200);
      expect(JSON.parse(health.body)).toMatchObject({ state: "idle", llm_inflight: 0, image_pending: false });
      const head = await rawHttp(base, `HEAD /healthz ${version}\r\n${hostLines}Connection: close\r\n\r\n`);
      expect(head.status).toBe(200);
      expect(head.body).toBe("");
      const metrics = await rawHttp(base, get("/metrics", hostLines, version));
      expect(metrics.status).toBe(200);
      expect(metrics.body).toContain("gpu_turnstile_");
    }
  });

  test("a proxied request gets 400 in its dialect, and reaches no upstream", async () => {
    s().pair.ollama.clearCalls();
    s().pair.comfy.clearCalls();
    const native = await rawHttp(s().t.ollamaUrl, get("/api/tags", hostLines, version));
    expect(native.status).toBe(400);
    expect(JSON.parse(native.body)).toEqual({ error: expect.stringContaining("Host") });
    const openai = await rawHttp(s().t.ollamaUrl, get("/v1/models", hostLines, version));
    expect(openai.status).toBe(400);
    expect(JSON.parse(openai.body)).toEqual({ error: { message: expect.stringContaining("Host"), type: "invalid_request", param: null, code: null } });
    const comfy = await rawHttp(s().t.comfyUrl, `POST /prompt ${version}\r\n${hostLines}Content-Length: 2\r\nConnection: close\r\n\r\n{}`);
    expect(comfy.status).toBe(400);
    expect(JSON.parse(comfy.body)).toMatchObject({ error: { type: "invalid_request", message: expect.stringContaining("Host") }, node_errors: {} });
    expect(s().pair.ollama.calls).toEqual([]);
    expect(s().pair.comfy.calls).toEqual([]);
    expect(s().t.lock.state).toBe("idle");
  });
});

test("two Host fields: 400 (RFC 9112 §3.2), nothing forwarded", async () => {
  s().pair.ollama.clearCalls();
  const res = await rawHttp(s().t.ollamaUrl, "GET /api/tags HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\nConnection: close\r\n\r\n");
  expect(res.status).toBe(400);
  expect(JSON.parse(res.body)).toEqual({ error: expect.stringContaining("more than one Host") });
  expect(s().pair.ollama.calls).toEqual([]);
});

describe("a repeated Content-Length (RFC 9110 §8.6)", () => {
  test("equal values: one is forwarded and Ollama answers", async () => {
    s().pair.ollama.clearCalls();
    const body = JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }], stream: false });
    const res = await rawHttp(
      s().t.ollamaUrl,
      `POST /api/chat HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
    );
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body)).toMatchObject({ message: { role: "assistant" }, done: true });
    expect(s().pair.ollama.calls.find((c) => c.path === "/api/chat")?.headers["content-length"]).toBe(String(body.length));
    await s().t.settled();
  });

  test("differing values: 400, nothing forwarded", async () => {
    s().pair.ollama.clearCalls();
    const res = await rawHttp(s().t.ollamaUrl, "POST /api/chat HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\nContent-Length: 3\r\nConnection: close\r\n\r\n{}x");
    // Bun refuses this one itself, before the turnstile sees it (front-door.ts would answer in the dialect).
    expect(res.status).toBe(400);
    expect(s().pair.ollama.calls).toEqual([]);
    expect(s().t.lock.state).toBe("idle");
  });
});
