/**
 * Websocket relay on the ComfyUI listener: frames pass intact both ways (text stays text, binary
 * stays binary, 1 MiB included), close codes cross in both directions, the greeting ComfyUI sends
 * at connect is not lost, a client that dies mid-connection harms nothing, and a websocket never
 * touches the GPU lock.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { ServerWebSocket } from "bun";
import { sampleValue } from "../../support/prom-parse.ts";
import { startTestTurnstile, type TestTurnstile } from "../../support/turnstile.ts";
import { health, relayedSockets, scrape, type Stack, startStack, until } from "./helpers.ts";

interface Client {
  ws: WebSocket;
  messages: (string | ArrayBuffer)[];
  closed: Promise<{ code: number; reason: string }>;
}

/** Opens a websocket and records every message from the first one on. */
function openWs(url: string): Promise<Client> {
  const ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  const messages: (string | ArrayBuffer)[] = [];
  ws.onmessage = (e) => messages.push(e.data as string | ArrayBuffer);
  const closed = new Promise<{ code: number; reason: string }>((resolve) => {
    ws.onclose = (e) => resolve({ code: e.code, reason: e.reason });
  });
  return new Promise((resolve, reject) => {
    ws.onopen = () => resolve({ ws, messages, closed });
    ws.onerror = () => reject(new Error(`websocket ${url} failed`));
  });
}

const wsUrl = (http: string, path: string) => http.replace(/^http/, "ws") + path;

describe("websocket relay to the simulated ComfyUI", () => {
  let s: Stack;
  const lockEvents: unknown[] = [];
  beforeAll(async () => {
    s = await startStack({}, { comfy: { wsEcho: true } });
    s.t.lock.onEvent((e) => lockEvents.push(e));
  });
  afterAll(async () => {
    await s.stop();
  });

  test("ComfyUI's status greeting, sent right at connect, is the first message", async () => {
    const c = await openWs(wsUrl(s.t.comfyUrl, "/ws?clientId=greeted"));
    await until(() => c.messages.length >= 1, "first message");
    const first = JSON.parse(c.messages[0] as string);
    expect(first).toEqual({ type: "status", data: { status: { exec_info: { queue_remaining: 0 } }, sid: "greeted" } });
    c.ws.close();
    await c.closed;
  });

  test("text and a 1 MiB binary frame are relayed intact both ways; the lock is never touched", async () => {
    lockEvents.length = 0;
    const c = await openWs(wsUrl(s.t.comfyUrl, "/api/ws?clientId=frames"));
    await until(() => c.messages.length >= 1, "greeting");
    const big = new Uint8Array(1024 * 1024).map((_, i) => (i * 131 + (i >> 8)) & 0xff);
    const text = "héllo ✓ " + "x".repeat(70_000);
    c.ws.send(text);
    c.ws.send(big);
    c.ws.send("after");
    await until(() => c.messages.length >= 4, "three echoes");
    expect(c.messages[1]).toBe(text);
    expect(c.messages[2]).toBeInstanceOf(ArrayBuffer);
    const back = new Uint8Array(c.messages[2] as ArrayBuffer);
    expect(back.length).toBe(big.length);
    expect(Buffer.from(back).equals(Buffer.from(big))).toBe(true);
    expect(c.messages[3]).toBe("after");

    // An open, busy websocket leaves the GPU idle.
    expect(await health(s.t.comfyUrl)).toEqual({ state: "idle", llm_inflight: 0, image_pending: false });
    c.ws.close(1000, "done");
    expect(await c.closed).toEqual({ code: 1000, reason: "done" });
    await until(() => relayedSockets(s.pair.comfy) === 0, "upstream socket closed");
    expect(lockEvents).toEqual([]);
    const m = await scrape(s.t.comfyUrl);
    expect(sampleValue(m, "gpu_turnstile_requests_total", { listener: "comfy", class: "ws", status: "101" })).toBeGreaterThanOrEqual(1);
  });

  test("a client process killed mid-connection does not hurt the turnstile", async () => {
    const url = wsUrl(s.t.comfyUrl, "/ws?clientId=doomed");
    // The child streams 256 KiB frames through the relay until it is killed, so it dies mid-traffic.
    const script = `
      const ws = new WebSocket(${JSON.stringify(url)});
      const chunk = new Uint8Array(256 * 1024).fill(7);
      ws.onmessage = (e) => {
        if (typeof e.data === "string" && e.data.includes('"status"')) {
          console.log("open");
          setInterval(() => ws.send(chunk), 2);
        }
      };
      setInterval(() => {}, 1000);
    `;
    const child = Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "inherit" });
    try {
      const reader = child.stdout.getReader();
      let out = "";
      while (!out.includes("open")) {
        const { done, value } = await reader.read();
        if (done) throw new Error(`child exited before its websocket opened: ${out}`);
        out += new TextDecoder().decode(value);
      }
      reader.releaseLock();
      await until(() => relayedSockets(s.pair.comfy) === 1, "child's socket relayed");
    } finally {
      child.kill("SIGKILL");
    }
    expect(await child.exited).not.toBe(0);
    // The relay noticed and closed its upstream side.
    await until(() => relayedSockets(s.pair.comfy) === 0, "upstream side closed after the kill");

    expect(await health(s.t.comfyUrl)).toEqual({ state: "idle", llm_inflight: 0, image_pending: false });
    const c = await openWs(wsUrl(s.t.comfyUrl, "/ws?clientId=next"));
    await until(() => c.messages.length >= 1, "greeting");
    c.ws.send("still here");
    await until(() => c.messages.length >= 2, "echo");
    expect(c.messages[1]).toBe("still here");
    c.ws.close();
    await c.closed;
  });

  test("a socket cut in the middle of a frame does not hurt the turnstile", async () => {
    const port = s.t.listener("comfy")!.port;
    const gotHeaders = Promise.withResolvers<void>();
    const sock = await Bun.connect({
      hostname: "127.0.0.1",
      port,
      socket: {
        data(_, d) {
          if (d.toString("latin1").startsWith("HTTP/1.1 101")) gotHeaders.resolve();
        },
      },
    });
    sock.write(
      "GET /ws?clientId=cut HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    );
    await gotHeaders.promise;
    await until(() => relayedSockets(s.pair.comfy) === 1, "raw socket relayed");
    // A masked binary frame announcing 64 KiB, of which only a few bytes ever come.
    sock.write(new Uint8Array([0x82, 0xfe, 0x00, 0x01, 1, 2, 3, 4, 9, 9, 9]));
    sock.terminate();
    await until(() => relayedSockets(s.pair.comfy) === 0, "upstream side closed after the cut");
    expect(await health(s.t.comfyUrl)).toEqual({ state: "idle", llm_inflight: 0, image_pending: false });
  });
});

describe("close codes cross the relay both ways", () => {
  /**
   * A bare websocket upstream that reports how its peer closed, by the connection's path, and can
   * close on request. (The ComfyUI simulator does not expose close codes.)
   */
  let upstream: ReturnType<typeof Bun.serve<string>>;
  let t: TestTurnstile;
  const upstreamClosed = new Map<string, { code: number; reason: string }>();

  beforeAll(() => {
    upstream = Bun.serve<string>({
      hostname: "127.0.0.1",
      port: 0,
      fetch(req, server) {
        const url = new URL(req.url);
        if (server.upgrade(req, { data: url.pathname + url.search })) return undefined;
        return new Response("not found", { status: 404 });
      },
      websocket: {
        message(ws: ServerWebSocket<string>, msg) {
          if (msg === "close-me") ws.close(4002, "server says bye");
          else if (msg === "die") ws.terminate();
          else ws.send(msg);
        },
        close(ws, code, reason) {
          upstreamClosed.set(ws.data, { code, reason });
        },
      },
    });
    t = startTestTurnstile({ COMFY_URL: `http://127.0.0.1:${upstream.port}` });
  });
  afterAll(async () => {
    await t.close();
    await upstream.stop(true);
  });

  test("client closes with 4001 'bye': the upstream sees 4001 'bye'", async () => {
    const c = await openWs(wsUrl(t.comfyUrl, "/ws?clientId=c4001"));
    c.ws.close(4001, "bye");
    expect(await c.closed).toEqual({ code: 4001, reason: "bye" });
    await until(() => upstreamClosed.has("/ws?clientId=c4001"), "upstream close");
    expect(upstreamClosed.get("/ws?clientId=c4001")).toEqual({ code: 4001, reason: "bye" });
  });

  test("the upstream closes with 4002: the client sees 4002 and the reason", async () => {
    const c = await openWs(wsUrl(t.comfyUrl, "/ws"));
    c.ws.send("close-me");
    expect(await c.closed).toEqual({ code: 4002, reason: "server says bye" });
  });

  test("a client close without a code (1005, which may not be sent) reaches the upstream as one", async () => {
    const a = await openWs(wsUrl(t.comfyUrl, "/ws?clientId=bare"));
    a.ws.close();
    expect((await a.closed).code).toBe(1005);
    await until(() => upstreamClosed.has("/ws?clientId=bare"), "upstream close");
    expect(upstreamClosed.get("/ws?clientId=bare")?.code).toBe(1005);
  });

  test("the upstream dies abruptly (1006): the client is cut too, and the turnstile stays up", async () => {
    const c = await openWs(wsUrl(t.comfyUrl, "/ws"));
    c.ws.send("ping");
    await until(() => c.messages.length === 1, "echo");
    // The upstream drops the TCP connection without a close frame: the relay sees 1006, a code
    // that may not be sent (Bun throws), so it must cut the client the same way.
    c.ws.send("die");
    expect((await c.closed).code).toBe(1006);
    expect(await health(t.comfyUrl)).toEqual({ state: "idle", llm_inflight: 0, image_pending: false });
  });
});
