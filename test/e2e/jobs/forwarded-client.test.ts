/**
 * Clients behind a proxy, through the real listener (issue 30, TRUSTED_PROXIES): a peer named there
 * is a proxy, and each address its X-Forwarded-For names is a client of its own (here, each with its
 * own LLM quota, its own image-job quota on the synchronous kinds); any other peer is the client,
 * whatever X-Forwarded-For it writes. Peers are local addresses of their own (127.0.0.x on Linux loopback).
 */
import { afterEach, expect, test } from "bun:test";
import { request, type IncomingMessage } from "node:http";
import { SimGpu } from "../../../src/sim/gpu.ts";
import { IMAGE_KIND_SIMS, type ImageSimHandle } from "../../../src/sim/image-kinds.ts";
import { startTestTurnstile, type TestTurnstile } from "../../support/turnstile.ts";
import { type Stack, startStack, until } from "./helpers.ts";

let s: Stack | undefined;
let a1111: { image: ImageSimHandle; t: TestTurnstile } | undefined;
const open: IncomingMessage[] = [];
afterEach(async () => {
  for (const res of open.splice(0)) res.destroy();
  await s?.stop();
  s = undefined;
  await a1111?.t.close();
  await a1111?.image.stop();
  a1111 = undefined;
});

const PROXY = "127.0.0.1";

/** A chat from local address `from`: its status, once its first chunk came (a 200 is left streaming) or its whole answer. */
function chatFrom(from: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  const url = new URL(s!.t.ollamaUrl);
  const body = JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }] });
  return new Promise((resolve, reject) => {
    const req = request({ host: url.hostname, port: url.port, method: "POST", path: "/api/chat", localAddress: from, headers: { "content-type": "application/json", ...headers } }, (res) => {
      if (res.statusCode === 200) {
        open.push(res);
        res.once("data", () => resolve({ status: 200, body: "" }));
        return;
      }
      let text = "";
      res.on("data", (c: Buffer) => (text += c.toString()));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

test("QUOTA_LLM_REQUESTS=1 behind a trusted proxy: each forwarded address is its own client; a spoofed X-Forwarded-For from any other peer is not", async () => {
  s = await startStack({ ollama: { tokenDelayMs: 50, tokens: 200 }, env: { TRUSTED_PROXIES: PROXY, QUOTA_LLM_REQUESTS: "1" } });
  const xff = (v: string) => ({ "x-forwarded-for": v });

  // Two clients of the proxy: one slot each.
  expect((await chatFrom(PROXY, xff("10.0.0.1"))).status).toBe(200);
  expect((await chatFrom(PROXY, xff("10.0.0.2"))).status).toBe(200);
  // 10.0.0.1 again, with a first hop of its own making: the rightmost address is the client.
  const again = await chatFrom(PROXY, xff("10.0.0.9, 10.0.0.1"));
  expect(again.status).toBe(429);
  expect(again.body).toContain("client 10.0.0.1 already has 1 LLM requests");

  // A peer that is no proxy is itself, whatever it writes.
  expect((await chatFrom("127.0.0.60", xff("10.0.0.3"))).status).toBe(200);
  const spoofed = await chatFrom("127.0.0.60", xff("10.0.0.4"));
  expect(spoofed.status).toBe(429);
  expect(spoofed.body).toContain("client 127.0.0.60 already has");
  expect(spoofed.body).not.toContain("10.0.0.4");

  // A header that names nobody leaves the proxy's own address: one client, with its own slot.
  expect((await chatFrom(PROXY, xff("unknown"))).status).toBe(200);
  const proxyItself = await chatFrom(PROXY, { forwarded: "for=_hidden" });
  expect(proxyItself.status).toBe(429);
  expect(proxyItself.body).toContain(`client ${PROXY} already has`);

  for (const res of open.splice(0)) res.destroy();
  await until(() => s!.t.lock.snapshot().llmInflight === 0, "the cut chats' slots given back");
  expect((await chatFrom(PROXY, xff("10.0.0.1"))).status).toBe(200);
}, 15_000);

test("IMAGE_KIND=a1111, QUOTA_IMAGE_JOBS=1 behind a trusted proxy: the synchronous generations go by the forwarded address too", async () => {
  const gpu = new SimGpu();
  const image = await IMAGE_KIND_SIMS.a1111.start(gpu, { jobMs: 30, loadMs: 10, reloadMs: 5, unloadMs: 10 });
  const t = startTestTurnstile({ OLLAMA_URL: "", COMFY_URL: image.url, IMAGE_KIND: "a1111", TRUSTED_PROXIES: PROXY, QUOTA_IMAGE_JOBS: "1" });
  a1111 = { image, t };
  const generate = (xff: string, jobMs?: number) => IMAGE_KIND_SIMS.a1111.generate(t.comfyUrl, { headers: { "x-forwarded-for": xff }, jobMs });
  const first = generate("10.0.0.1", 400);
  await until(() => image.calls.some((c) => c.path === "/sdapi/v1/txt2img"), "10.0.0.1's generation running");
  const other = generate("10.0.0.2");
  const again = await generate("10.0.0.1");
  expect(again.status).toBe(429);
  expect(((await again.json()) as { detail: string }).detail).toContain("client 10.0.0.1 already has 1 image jobs");
  expect([(await other).status, (await first).status]).toEqual([200, 200]);
  await t.settled();
  expect(gpu.overlaps()).toEqual([]);
});
