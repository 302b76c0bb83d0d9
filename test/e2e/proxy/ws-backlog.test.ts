/**
 * A websocket side that does not read while the other floods (a background browser tab, a ComfyUI
 * busy in Python): the relay pauses the sender instead of holding the flood. Frames are never
 * dropped silently from a socket left open, and the turnstile's memory stays bounded.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type Stack, startStack, until } from "./helpers.ts";

const MIB = 1024 * 1024;
const FLOOD_MIB = 160;

describe("the client stops reading while ComfyUI sends", () => {
  let s: Stack;
  beforeAll(async () => {
    s = await startStack({}, { comfy: { wsEcho: true } });
  });
  afterAll(async () => {
    await s.stop();
  });

  test(`${FLOOD_MIB} MiB echoed to a client that reads none of it for a while: every frame arrives, in order`, async () => {
    // Bun's client can stop reading its socket (not in the DOM type).
    const ws = new WebSocket(`${s.t.comfyUrl.replace("http", "ws")}/ws?clientId=deaf`) as WebSocket & { pause(): boolean; resume(): boolean };
    ws.binaryType = "arraybuffer";
    let echoes = 0;
    let inOrder = true;
    ws.onmessage = (e) => {
      if (typeof e.data === "string") return; // the greeting
      inOrder &&= new Uint8Array(e.data as ArrayBuffer)[0] === echoes % 256;
      echoes++;
    };
    await new Promise((resolve, reject) => {
      ws.onopen = resolve;
      ws.onerror = reject;
    });
    ws.pause();
    for (let i = 0; i < FLOOD_MIB; i++) ws.send(new Uint8Array(MIB).fill(i % 256));
    // 40 MiB have left the client while it read nothing: well past what Bun holds for a slow reader.
    await until(() => ws.bufferedAmount <= (FLOOD_MIB - 40) * MIB, "40 MiB sent", 10_000);
    ws.resume();
    await until(() => echoes === FLOOD_MIB || ws.readyState !== WebSocket.OPEN, "every echo", 10_000);
    expect({ echoes, inOrder, open: ws.readyState === WebSocket.OPEN }).toEqual({ echoes: FLOOD_MIB, inOrder: true, open: true });
    ws.close();
  }, 20_000);
});
