/**
 * Host and Origin. A loopback-bound Ollama refuses a Host that does not name this machine (its
 * DNS-rebinding guard, O5), and ComfyUI refuses a loopback Host whose Origin names another host
 * (C7). The turnstile sends the upstream its own Host, so it applies Ollama's rule itself on a
 * loopback listener: the rebinding pair is refused before anything is forwarded. A name the
 * operator allows (ALLOWED_HOSTS) passes, as does any Host on a listener bound to all interfaces;
 * for those, an Origin equal to the client's Host is rewritten, and a foreign one is still refused.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { startTestTurnstile, type TestTurnstile } from "../../support/turnstile.ts";
import { promptBody, rawHttp, relayedSockets, type Stack, startStack, until } from "./helpers.ts";

let s: Stack;
/** The same simulators behind a loopback turnstile that allows two more names. */
let allowed: TestTurnstile;
/** …and behind one whose listeners are bound to every interface. */
let open: TestTurnstile;
beforeAll(async () => {
  // Both guards on, as the real servers ship.
  s = await startStack({}, { ollama: { checkHost: true, checkOrigin: true }, comfy: { checkOrigin: true } });
  const upstreams = { OLLAMA_URL: s.pair.ollama.url, COMFY_URL: s.pair.comfy.url };
  allowed = startTestTurnstile({ ...upstreams, ALLOWED_HOSTS: "gpu.lan, *.example.org" });
  open = startTestTurnstile({ ...upstreams, LISTEN_OLLAMA: "0.0.0.0:0", LISTEN_COMFY: "0.0.0.0:0" });
  // The first health probes would show up in the upstreams' call logs.
  await Promise.all([s.t.probed, allowed.probed, open.probed]);
});
afterAll(async () => {
  await allowed.close();
  await open.close();
  await s.stop();
});

const wsUrl = (http: string, path: string) => http.replace(/^http/, "ws") + path;
const port = (base: string) => new URL(base).port;

/** A websocket handshake with a chosen Host and Origin (a WebSocket client writes its own Host). */
function wsHandshake(path: string, host: string, origin: string): string {
  return `GET ${path} HTTP/1.1\r\nHost: ${host}\r\nOrigin: ${origin}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`;
}

describe("DNS rebinding, on a turnstile bound to 127.0.0.1", () => {
  test("the rebinding pair gets 403 in the dialect on every route, and nothing reaches Ollama", async () => {
    const host = `evil.example:${port(s.t.ollamaUrl)}`;
    const headers = { host, origin: `http://${host}`, "content-type": "application/json" };
    s.pair.ollama.clearCalls();
    const tags = await fetch(`${s.t.ollamaUrl}/api/tags`, { headers });
    const chat = await fetch(`${s.t.ollamaUrl}/api/chat`, {
      method: "POST",
      headers,
      body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }] }),
    });
    const pull = await fetch(`${s.t.ollamaUrl}/api/pull`, { method: "POST", headers, body: JSON.stringify({ model: "evil/model" }) });
    const models = await fetch(`${s.t.ollamaUrl}/v1/models`, { headers });
    expect([tags.status, chat.status, pull.status, models.status]).toEqual([403, 403, 403, 403]);
    for (const res of [tags, chat, pull]) {
      expect(await res.json()).toEqual({ error: expect.stringContaining(`Host "${host}" is not allowed`) });
    }
    expect(await models.json()).toMatchObject({ error: { type: "forbidden_host", message: expect.stringContaining("ALLOWED_HOSTS") } });
    expect(s.pair.ollama.calls).toEqual([]);
    expect(s.pair.ollama.loadedModels()).toEqual([]);
    expect(s.t.lock.state).toBe("idle");
    // The operator is told once, at warn, which Host was refused and what to do about it.
    expect(s.t.logLines.filter((l) => l.includes("refused Host"))).toEqual([
      expect.stringMatching(new RegExp(`WARN.*ollama listener refused Host "${host}": .*ALLOWED_HOSTS`)),
    ]);
  });

  test("the same on the ComfyUI listener: HTTP, /prompt and the websocket are refused, no job, no socket", async () => {
    const host = `evil.example:${port(s.t.comfyUrl)}`;
    s.pair.comfy.clearCalls();
    const stats = await fetch(`${s.t.comfyUrl}/system_stats`, { headers: { host, origin: `http://${host}` } });
    expect(stats.status).toBe(403);
    expect(await stats.json()).toMatchObject({ error: { type: "forbidden_host" }, node_errors: {} });
    const prompt = await fetch(`${s.t.comfyUrl}/prompt`, { method: "POST", headers: { host, origin: `http://${host}` }, body: promptBody(10) });
    expect(prompt.status).toBe(403);
    const ws = await rawHttp(s.t.comfyUrl, wsHandshake("/ws?clientId=evil", host, `http://${host}`));
    expect(ws.status).toBe(403);
    expect(JSON.parse(ws.body)).toMatchObject({ error: { type: "forbidden_host" } });
    expect(s.pair.comfy.calls).toEqual([]);
    expect(s.pair.comfy.jobs()).toEqual([]);
    expect(relayedSockets(s.pair.comfy)).toBe(0);
    expect(s.t.lock.state).toBe("idle");
  });

  test("this machine's names and addresses still pass", async () => {
    for (const host of ["localhost", `localhost:${port(s.t.ollamaUrl)}`, "127.0.0.1", "box.local", "host.docker.internal", "10.0.0.5:11434", "[::1]:11434"]) {
      const res = await fetch(`${s.t.ollamaUrl}/api/tags`, { headers: { host } });
      expect({ host, status: res.status }).toEqual({ host, status: 200 });
      await res.arrayBuffer();
    }
  });
});

describe("ALLOWED_HOSTS=gpu.lan, *.example.org", () => {
  test("Host gpu.lan:11434 passes (Ollama itself would refuse it, the turnstile sends its own Host); others are still refused", async () => {
    const host = "gpu.lan:11434";
    expect((await fetch(`${s.pair.ollama.url}/api/tags`, { headers: { host } })).status).toBe(403);
    s.pair.ollama.clearCalls();
    const via = await fetch(`${allowed.ollamaUrl}/api/tags`, { headers: { host, origin: `http://${host}` } });
    expect(via.status).toBe(200);
    expect(((await via.json()) as { models: unknown[] }).models.length).toBeGreaterThan(0);
    // The name the client used travels on for the upstream's logs.
    expect(s.pair.ollama.calls.at(-1)?.headers["x-forwarded-host"]).toBe(host);
    expect((await fetch(`${allowed.ollamaUrl}/api/tags`, { headers: { host: "box.example.org" } })).status).toBe(200);
    expect((await fetch(`${allowed.ollamaUrl}/api/tags`, { headers: { host: "evil.example:11434" } })).status).toBe(403);
    expect((await fetch(`${allowed.ollamaUrl}/api/tags`, { headers: { host: "example.org" } })).status).toBe(403);
  });

  test("ComfyUI accepts a page loaded through the turnstile under an allowed name (its Origin is rewritten), HTTP and websocket", async () => {
    const host = `gpu.lan:${port(allowed.comfyUrl)}`;
    const origin = `http://${host}`;
    const via = await fetch(`${allowed.comfyUrl}/system_stats`, { headers: { host, origin } });
    expect(via.status).toBe(200);
    expect(((await via.json()) as { devices: unknown[] }).devices.length).toBe(1);
    const ws = await rawHttp(allowed.comfyUrl, wsHandshake("/ws?clientId=browser", host, origin));
    expect(ws.status).toBe(101);
    await until(() => relayedSockets(s.pair.comfy) === 0, "upstream socket closed");
  });

  test("ComfyUI accepts a page loaded through the turnstile by address (Origin = the turnstile)", async () => {
    const origin = allowed.comfyUrl;
    // Sent as is, that Origin names another host than ComfyUI's own: its guard says no.
    expect((await fetch(`${s.pair.comfy.url}/system_stats`, { headers: { origin } })).status).toBe(403);
    const post = await fetch(`${allowed.comfyUrl}/api/history`, { method: "POST", headers: { origin }, body: JSON.stringify({ delete: [] }) });
    expect(post.status).toBe(200);

    const ws = new WebSocket(wsUrl(allowed.comfyUrl, "/ws?clientId=browser"), { headers: { origin } } as unknown as string[]);
    const first = await new Promise<string>((resolve, reject) => {
      ws.onmessage = (e) => resolve(String(e.data));
      ws.onerror = () => reject(new Error("websocket with the turnstile's Origin was refused"));
    });
    expect(JSON.parse(first)).toMatchObject({ type: "status", data: { sid: "browser" } });
    ws.close();
    await until(() => relayedSockets(s.pair.comfy) === 0, "upstream socket closed");
  });

  test("cross-site stays refused: a foreign Origin on an allowed Host, on /prompt and on the websocket", async () => {
    const host = `gpu.lan:${port(allowed.comfyUrl)}`;
    const origin = "http://evil.example";
    s.pair.comfy.clearCalls();
    const res = await fetch(`${allowed.comfyUrl}/system_stats`, { headers: { host, origin } });
    expect(res.status).toBe(403);
    const post = await fetch(`${allowed.comfyUrl}/prompt`, { method: "POST", headers: { host, origin }, body: promptBody(10) });
    expect(post.status).toBe(403);
    await allowed.settled();
    // ComfyUI queued nothing.
    expect(s.pair.comfy.jobs()).toEqual([]);

    const ws = await rawHttp(allowed.comfyUrl, wsHandshake("/ws", host, origin));
    expect(ws.status).not.toBe(101);
    const plain = new WebSocket(wsUrl(allowed.comfyUrl, "/ws"), { headers: { origin } } as unknown as string[]);
    const outcome = await new Promise<string>((resolve) => {
      plain.onopen = () => resolve("open");
      plain.onerror = () => resolve("refused");
    });
    expect(outcome).toBe("refused");
    expect(relayedSockets(s.pair.comfy)).toBe(0);
  });
});

describe("a turnstile bound to all interfaces (0.0.0.0)", () => {
  test("any Host passes, as with an Ollama bound there", async () => {
    const host = `evil.example:${port(open.ollamaUrl)}`;
    const res = await fetch(`${open.ollamaUrl}/api/tags`, { headers: { host, origin: `http://${host}` } });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { models: unknown[] }).models.length).toBeGreaterThan(0);
    const stats = await fetch(`${open.comfyUrl}/system_stats`, { headers: { host: "gpu.anything" } });
    expect(stats.status).toBe(200);
    await stats.arrayBuffer();
  });
});
