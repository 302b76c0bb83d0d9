/**
 * Percent-encoded paths: Ollama (gin) and ComfyUI (aiohttp) route on the decoded path, and so do
 * the simulators. `POST /api/%63hat` is a chat and `POST /pr%6Fmpt` queues a prompt; the turnstile
 * must take the lock for them exactly as for the plain spelling, or the two tenants meet on the
 * GPU. The path is forwarded as it was received.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { postJson, promptBody, readTimed, type Stack, startImageJob, startStack, until } from "./helpers.ts";

let s: Stack;
beforeAll(async () => {
  // Slow tokens, so a chat stream is still open while the image request arrives.
  s = await startStack({}, { ollama: { tokenDelayMs: 40 } });
  // The first health probes would show up in the upstreams' call logs.
  await s.t.probed;
});
afterAll(async () => {
  await s.stop();
});

const CHAT = [{ role: "user", content: "hi" }];
const TAG = "x-e2e-encoded";

describe("encoded paths take the lock like the plain ones", () => {
  test("during an image job, encoded LLM paths wait for it; the ledger shows no overlap", async () => {
    const { ollama, gpu } = s.pair;
    const encoded: [string, unknown][] = [
      ["/api/%63hat", { model: "llama3.2", messages: CHAT, stream: false }],
      ["/v1/chat%2Fcompletions", { model: "llama3.2", messages: CHAT }],
      ["/api/%67enerate", { model: "llama3.2", prompt: "hi", stream: false }],
      ["/api/x%2F..%2Fembed", { model: "nomic-embed-text", input: "hi" }],
    ];
    await startImageJob(s.t, 500);
    expect(s.t.lock.state).toBe("image");
    const held = encoded.map(async ([path, body]) => {
      const res = await postJson(`${s.t.ollamaUrl}${path}`, body, { [TAG]: path });
      await res.arrayBuffer();
      return res.status;
    });
    await until(() => s.t.lock.snapshot().llmWaiting === encoded.length, "every encoded LLM request waiting at the lock");
    expect(ollama.calls.filter((c) => c.headers[TAG])).toEqual([]);

    // All but the dot-segment one are real routes of the simulator, which answers them after the job.
    expect(await Promise.all(held)).toEqual([200, 200, 200, 404]);
    await s.t.settled();
    const freeAt = s.pair.comfy.calls.filter((c) => c.path === "/free").at(-1)!.at;
    for (const [path] of encoded) {
      const call = ollama.calls.find((c) => c.headers[TAG] === path);
      // Forwarded as received, after ComfyUI freed its memory.
      expect({ path: call?.path, after: call!.at >= freeAt }).toEqual({ path, after: true });
    }
    expect(gpu.overlaps()).toEqual([]);
  });

  test("during a chat stream, an encoded /prompt waits for it; the ledger shows no overlap", async () => {
    const { comfy, gpu } = s.pair;
    await s.t.settled();
    comfy.clearCalls();
    const stream = await postJson(`${s.t.ollamaUrl}/api/chat`, { model: "llama3.2", messages: CHAT });
    expect(stream.status).toBe(200);
    let image: Promise<Response[]> | undefined;
    const chunks = await readTimed(stream, async (_text, i) => {
      if (i !== 1) return;
      // Mid-stream: two spellings ComfyUI routes to its /prompt handler.
      image = Promise.all(
        ["/pr%6Fmpt", "/api%2Fprompt"].map((path) =>
          fetch(`${s.t.comfyUrl}${path}`, { method: "POST", body: promptBody(50), headers: { "content-type": "application/json" } }),
        ),
      );
      await until(() => s.t.lock.snapshot().imageWaiting === 2, "both image requests waiting at the lock");
      expect(comfy.calls.filter((c) => c.method === "POST")).toEqual([]);
    });
    expect(chunks.length).toBeGreaterThan(2);
    const answers = await image!;
    expect(answers.map((r) => r.status)).toEqual([200, 200]);
    await Promise.all(answers.map((r) => r.arrayBuffer()));
    await s.t.settled();
    // Forwarded as received.
    expect(comfy.calls.filter((c) => c.method === "POST" && c.path !== "/free").map((c) => c.path).sort()).toEqual(["/api%2Fprompt", "/pr%6Fmpt"]);
    expect(gpu.overlaps()).toEqual([]);
  });
});

describe("an invalid encoding gets 400 in the listener's dialect, and reaches no upstream", () => {
  test.each([
    ["ollama", "/api/%zzhat", { error: expect.stringContaining("invalid percent-encoding") }],
    ["ollama", "/api/chat%00", { error: expect.stringContaining("invalid percent-encoding") }],
    ["ollama", "/v1/chat/completions%", { error: { message: expect.stringContaining("invalid percent-encoding"), type: "invalid_request", param: null, code: null } }],
    ["comfy", "/pr%zzompt", { error: { type: "invalid_request", message: expect.stringContaining("invalid percent-encoding"), details: "", extra_info: {} }, node_errors: {} }],
  ] as const)("%s POST %s", async (listener, path, body) => {
    s.pair.ollama.clearCalls();
    s.pair.comfy.clearCalls();
    const base = listener === "ollama" ? s.t.ollamaUrl : s.t.comfyUrl;
    const res = await fetch(`${base}${path}`, { method: "POST", body: "{}" });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual(body);
    expect(s.pair.ollama.calls).toEqual([]);
    expect(s.pair.comfy.calls).toEqual([]);
    expect(s.t.lock.state).toBe("idle");
  });
});
