/**
 * GPU seconds per client through real sockets (issue 30, QUOTA_GPU_SECONDS): a client past its
 * GPU time gets 429 with Retry-After in its own API's shape while another client is served, and
 * the work it already had running runs to its end; the card's ledger stays clean.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startA1111Sim } from "../../../src/sim/a1111.ts";
import { SimGpu } from "../../../src/sim/gpu.ts";
import { parseExposition, sampleValue } from "../../support/prom-parse.ts";
import { startTestTurnstile } from "../../support/turnstile.ts";
import { expectLlmQuotaRefused, keyedChat, newPromptId, promptBody, type Stack, startStack, submit, until } from "./helpers.ts";

let s: Stack | undefined;
let dir: string | undefined;
afterEach(async () => {
  await s?.stop();
  s = undefined;
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

/** alice and bob, told apart by their ComfyUI client_id or their API key. */
function clientsFile(): string {
  dir = mkdtempSync(join(tmpdir(), "gt-gpu-quota-"));
  const file = join(dir, "clients");
  writeFileSync(file, "alice normal client_id=alice- key=sk-alice-0001\nbob normal client_id=bob- key=sk-bob-0002\n");
  return file;
}

interface GpuUse {
  client: string;
  class: string;
  used_s: number;
  quota_s: number;
  running: number;
}

async function gpuUse(stack: Stack): Promise<GpuUse[]> {
  const body = (await (await fetch(`${stack.t.comfyUrl}/turnstile/status`)).json()) as { gpu_use?: GpuUse[] };
  return body.gpu_use ?? [];
}

/** Polls the status until `client` has used at least `seconds` of GPU time in the window. */
async function used(stack: Stack, client: string, seconds: number, what: string): Promise<GpuUse> {
  let found: GpuUse | undefined;
  await until(async () => {
    found = (await gpuUse(stack)).find((u) => u.client === client && u.used_s >= seconds);
    return found !== undefined;
  }, what);
  return found!;
}

const fromClient = (promptId: string, clientId: string) => JSON.stringify({ ...JSON.parse(promptBody(promptId)), client_id: clientId });
const refusals = async (stack: Stack, kind: string) =>
  sampleValue(parseExposition(await (await fetch(`${stack.t.comfyUrl}/metrics`)).text()), "gpu_turnstile_quota_refusals_total", { client_class: "normal", kind, reason: "gpu_seconds" });

describe("GPU seconds quota", () => {
  test("image jobs: past QUOTA_GPU_SECONDS while its job still runs, a client's new job gets 429 + Retry-After in ComfyUI's shape; another client's runs; the running one completes", async () => {
    s = await startStack({ comfy: { jobMs: 1800 }, env: { QUOTA_GPU_SECONDS: "1", QUOTA_GPU_WINDOW: "1h", CLIENTS_FILE: clientsFile() } });
    const aliceFirst = newPromptId();
    expect((await submit(s.t, fromClient(aliceFirst, "alice-1"))).status).toBe(200);
    const use = await used(s, "alice", 1, "alice's running job past 1 s of GPU time");
    expect(use).toMatchObject({ class: "normal", quota_s: 1, running: 1 });
    // Her job still runs: it is not touched.
    expect(s.comfy!.jobs().find((j) => j.id === aliceFirst)?.state).toBe("running");

    const refusedId = newPromptId();
    const refused = await submit(s.t, fromClient(refusedId, "alice-1"));
    expect(refused.status).toBe(429);
    // Not before enough of the hour has passed (its first second leaves the window then).
    const retryAfter = Number(refused.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThan(3500);
    expect(retryAfter).toBeLessThanOrEqual(3630);
    const body = (await refused.json()) as { error: { type: string; message: string } };
    expect(body.error.type).toBe("quota_exceeded");
    expect(body.error.message).toMatch(/^gpu-turnstile: client alice used \d+ s of GPU time in the last 1h0m0s \(its quota: 1 s\); retry in \d+ s$/);

    const bobId = newPromptId();
    expect((await submit(s.t, fromClient(bobId, "bob-1"))).status).toBe(200);
    await s.t.settled();
    const jobs = s.comfy!.jobs();
    expect(jobs.find((j) => j.id === aliceFirst)?.state).toBe("done");
    expect(jobs.find((j) => j.id === bobId)?.state).toBe("done");
    expect(jobs.some((j) => j.id === refusedId)).toBe(false);
    // Alice's whole run counted (about 1.8 s), Bob's too: the status shows both.
    const after = await gpuUse(s);
    expect(after.find((u) => u.client === "alice")!.used_s).toBeGreaterThanOrEqual(1.5);
    expect(after.find((u) => u.client === "bob")!.used_s).toBeGreaterThanOrEqual(1.5);
    expect(await refusals(s, "image")).toBe(1);
    expect(s.gpu.overlaps()).toEqual([]);
  }, 20_000);

  test("LLM requests: past its GPU seconds while its chat still streams, a client's new chat gets 429 in Ollama's and OpenAI's shapes; another key is served; the streaming chat ends whole", async () => {
    s = await startStack({ ollama: { tokenDelayMs: 50, tokens: 40 }, env: { QUOTA_GPU_SECONDS: "1", CLIENTS_FILE: clientsFile() } });
    const first = await keyedChat(s.t, "sk-alice-0001");
    expect(first.status).toBe(200);
    const firstText = first.text();
    await used(s, "alice", 1, "alice's streaming chat past 1 s of GPU time");

    expect(await expectLlmQuotaRefused(s.t, "sk-alice-0001", "client alice used")).toBeGreaterThan(3500);

    const bob = await keyedChat(s.t, "sk-bob-0002", { stream: false });
    expect(bob.status).toBe(200);
    await bob.text();
    // Alice's first chat was never cut: its last line is Ollama's done:true.
    const lines = (await firstText).trim().split("\n");
    expect(lines).toHaveLength(41);
    expect(JSON.parse(lines.at(-1)!)).toMatchObject({ done: true });
    expect(await refusals(s, "llm")).toBe(2);
    expect(s.gpu.overlaps()).toEqual([]);
  }, 20_000);

  test("a synchronous kind (A1111): its request's time counts; past the quota a client's next txt2img gets 429 in A1111's shape, another's is served", async () => {
    const gpu = new SimGpu();
    const a1111 = await startA1111Sim({ gpu, jobMs: 1200, loadMs: 5, reloadMs: 5, unloadMs: 5 });
    const t = startTestTurnstile({ COMFY_URL: a1111.url, IMAGE_KIND: "a1111", QUOTA_GPU_SECONDS: "1", CLIENTS_FILE: clientsFile() });
    try {
      const txt2img = (key: string) => fetch(`${t.comfyUrl}/sdapi/v1/txt2img`, { method: "POST", headers: { authorization: `Bearer ${key}` }, body: JSON.stringify({ prompt: "x", steps: 2 }) });
      expect((await txt2img("sk-alice-0001")).status).toBe(200);
      await t.settled();
      const refused = await txt2img("sk-alice-0001");
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(3500);
      expect((await refused.json()) as unknown).toMatchObject({ error: "quota_exceeded", detail: expect.stringContaining("client alice used 1 s of GPU time") });
      expect((await txt2img("sk-bob-0002")).status).toBe(200);
      await t.settled();
      expect(a1111.generations()).toBe(2);
      expect(gpu.overlaps()).toEqual([]);
    } finally {
      await t.close();
      await a1111.stop();
    }
  }, 20_000);

  test("with no GPU-seconds quota set, the status has no gpu_use and nothing is refused for it", async () => {
    s = await startStack({ comfy: { jobMs: 20 } });
    expect((await submit(s.t, promptBody(newPromptId()))).status).toBe(200);
    await s.t.settled();
    const body = (await (await fetch(`${s.t.comfyUrl}/turnstile/status`)).json()) as Record<string, unknown>;
    expect(body.gpu_use).toBeUndefined();
  });
});
