/**
 * Host and Origin: the turnstile is reached under its own name, which a loopback Ollama would
 * refuse (DNS-rebinding guard, O5) and which ComfyUI's same-origin guard would take for a foreign
 * site (C7). Through the turnstile both work; a truly foreign Origin is still refused.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type Stack, startStack, until } from "./helpers.ts";

let s: Stack;
beforeAll(async () => {
  // Both guards on, as the real servers ship.
  s = await startStack({}, { ollama: { checkHost: true, checkOrigin: true }, comfy: { checkOrigin: true } });
});
afterAll(async () => {
  await s.stop();
});

const wsUrl = (http: string, path: string) => http.replace(/^http/, "ws") + path;

describe("Host and Origin through the turnstile", () => {
  test("Ollama refuses Host: turnstile.example directly (403) but answers it through the turnstile", async () => {
    const host = "turnstile.example:11434";
    const direct = await fetch(`${s.pair.ollama.url}/api/tags`, { headers: { host } });
    expect(direct.status).toBe(403);
    s.pair.ollama.clearCalls();
    const via = await fetch(`${s.t.ollamaUrl}/api/tags`, { headers: { host } });
    expect(via.status).toBe(200);
    expect(((await via.json()) as { models: unknown[] }).models.length).toBeGreaterThan(0);
    // The name the client used travels on for the upstream's logs.
    expect(s.pair.ollama.calls.at(-1)?.headers["x-forwarded-host"]).toBe(host);
  });

  test("ComfyUI accepts a page loaded through the turnstile (Origin = the turnstile), HTTP and websocket", async () => {
    const origin = s.t.comfyUrl;
    // Sent as is, that Origin names another host than ComfyUI's own: its guard says no.
    expect((await fetch(`${s.pair.comfy.url}/system_stats`, { headers: { origin } })).status).toBe(403);
    const via = await fetch(`${s.t.comfyUrl}/system_stats`, { headers: { origin } });
    expect(via.status).toBe(200);
    expect(((await via.json()) as { devices: unknown[] }).devices.length).toBe(1);
    const post = await fetch(`${s.t.comfyUrl}/api/history`, { method: "POST", headers: { origin }, body: JSON.stringify({ delete: [] }) });
    expect(post.status).toBe(200);

    const ws = new WebSocket(wsUrl(s.t.comfyUrl, "/ws?clientId=browser"), { headers: { origin } } as unknown as string[]);
    const first = await new Promise<string>((resolve, reject) => {
      ws.onmessage = (e) => resolve(String(e.data));
      ws.onerror = () => reject(new Error("websocket with the turnstile's Origin was refused"));
    });
    expect(JSON.parse(first)).toMatchObject({ type: "status", data: { sid: "browser" } });
    ws.close();
    await until(() => s.pair.comfy.sockets() === 0, "upstream socket closed");
  });

  test("a foreign Origin is still refused by ComfyUI through the turnstile", async () => {
    const origin = "http://evil.example";
    const res = await fetch(`${s.t.comfyUrl}/system_stats`, { headers: { origin } });
    expect(res.status).toBe(403);
    const post = await fetch(`${s.t.comfyUrl}/prompt`, { method: "POST", headers: { origin }, body: "{}" });
    expect(post.status).toBe(403);
    // ComfyUI queued nothing.
    expect(s.pair.comfy.jobs()).toEqual([]);

    const ws = new WebSocket(wsUrl(s.t.comfyUrl, "/ws"), { headers: { origin } } as unknown as string[]);
    const outcome = await new Promise<string>((resolve) => {
      ws.onopen = () => resolve("open");
      ws.onerror = () => resolve("refused");
    });
    expect(outcome).toBe("refused");
    expect(s.pair.comfy.sockets()).toBe(0);
  });
});
