/**
 * A websocket side that does not read while the other floods (a background browser tab, a ComfyUI
 * busy in Python). Toward ComfyUI the relay pauses the client instead of holding the flood. Toward
 * a client that does not read, the turnstile holds at most WS_CLIENT_BACKLOG_BYTES, then closes it
 * with 1008 and says so in the log (issue 26: each such socket held ~19 MiB for as long as it
 * stayed open). Frames are never dropped silently from a socket left open.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { WS_CLIENT_BACKLOG_BYTES } from "../../../src/proxy/ws-relay.ts";
import { type Stack, startStack, until } from "./helpers.ts";

const MIB = 1024 * 1024;

/** Bun's client can stop reading its socket (not in the DOM type). */
type PausableWebSocket = WebSocket & { pause(): boolean; resume(): boolean };

describe("the client stops reading while ComfyUI sends", () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({}, { comfy: { wsEcho: true } });
  });
  afterAll(async () => {
    await s.stop();
  });

  async function open(clientId: string): Promise<{ ws: PausableWebSocket; echoes: () => number; closed: Promise<CloseEvent> }> {
    const ws = new WebSocket(`${s.t.comfyUrl.replace("http", "ws")}/ws?clientId=${clientId}`) as PausableWebSocket;
    ws.binaryType = "arraybuffer";
    let echoes = 0;
    ws.onmessage = (e) => {
      if (typeof e.data !== "string") echoes++;
    };
    const closed = new Promise<CloseEvent>((resolve) => (ws.onclose = resolve));
    await new Promise((resolve, reject) => {
      ws.onopen = resolve;
      ws.onerror = reject;
    });
    return { ws, echoes: () => echoes, closed };
  }

  test(`a client that reads none of a 32 MiB flood is closed with 1008 past ${WS_CLIENT_BACKLOG_BYTES / MIB} MiB, and the log says so`, async () => {
    const deaf = await open("deaf");
    deaf.ws.pause();
    for (let i = 0; i < 32; i++) deaf.ws.send(new Uint8Array(MIB).fill(i % 256));
    await until(() => s.t.logLines.some((l) => l.includes("the client did not read")), "the overflow logged", 10_000);
    deaf.ws.resume();
    const close = await deaf.closed;
    expect({ code: close.code, reason: close.reason }).toEqual({ code: 1008, reason: "gpu-turnstile: the client did not read its messages" });
    // It got what was on the wire before the close, not the whole flood.
    expect(deaf.echoes()).toBeLessThan(32);
    expect(s.t.logLines.find((l) => l.includes("the client did not read"))).toContain("websocket /ws closed (1008)");
  }, 20_000);

  test("a client that reads gets all of 32 MiB, a few frames ahead at a time, and stays open", async () => {
    const reader = await open("reader");
    // This process both sends and reads: a burst of 32 MiB would leave it no turn to read.
    for (let i = 0; i < 32; i++) {
      reader.ws.send(new Uint8Array(MIB).fill(i % 256));
      if (i % 2 === 1) await until(() => reader.echoes() >= i - 1 || reader.ws.readyState !== WebSocket.OPEN, `echo ${i - 1}`, 10_000);
    }
    await until(() => reader.echoes() === 32 || reader.ws.readyState !== WebSocket.OPEN, "every echo", 10_000);
    expect({ echoes: reader.echoes(), open: reader.ws.readyState === WebSocket.OPEN }).toEqual({ echoes: 32, open: true });
    reader.ws.close();
  }, 20_000);
});
