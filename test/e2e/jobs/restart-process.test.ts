/**
 * The turnstile dies mid-job — `kill -9`, or a SIGTERM whose SHUTDOWN_TIMEOUT runs out — and is
 * started again while ComfyUI still runs the job: the new process must not let a chat load a
 * model beside it. Real processes (`bun src/main.ts`) in front of the simulators; the GPU ledger
 * decides.
 */
import { afterAll, afterEach, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SimGpu, startComfySim, startOllamaSim, type ComfySim, type OllamaSim } from "../../../src/sim/index.ts";
import type { StatusDoc } from "../../../src/status/model.ts";
import { type MainProcess, startMain } from "../../support/main-process.ts";
import { callsTo, FAST_COMFY, FAST_OLLAMA, newPromptId, postJson, promptBody, waitFor } from "./helpers.ts";

let cwd: string;
beforeAll(() => {
  cwd = mkdtempSync(join(tmpdir(), "turnstile-restart-"));
});
afterAll(() => rmSync(cwd, { recursive: true, force: true }));

let procs: MainProcess[] = [];
let sims: { ollama: OllamaSim; comfy: ComfySim } | undefined;
afterEach(async () => {
  await Promise.all(procs.map((p) => p.kill("SIGKILL")));
  await sims?.ollama.stop();
  await sims?.comfy.stop();
  procs = [];
  sims = undefined;
});

const chatBody = { model: "llama3.2", stream: false, messages: [{ role: "user", content: "hi" }] };

for (const signal of ["SIGKILL", "SIGTERM"] as const) {
  const how = signal === "SIGKILL" ? "kill -9" : "SIGTERM past SHUTDOWN_TIMEOUT";
  test(`${how} mid-job, then a restart: the new process picks the job up and a chat waits for it and the /free`, async () => {
    const gpu = new SimGpu();
    sims = { ollama: await startOllamaSim({ ...FAST_OLLAMA, gpu }), comfy: await startComfySim({ ...FAST_COMFY, gpu }) };
    const env = {
      OLLAMA_URL: sims.ollama.url,
      COMFY_URL: sims.comfy.url,
      LISTEN_OLLAMA: "127.0.0.1:0",
      LISTEN_COMFY: "127.0.0.1:0",
      HISTORY_POLL_INTERVAL: "10ms",
      FREE_POLL_INTERVAL: "10ms",
      UNLOAD_POLL_INTERVAL: "10ms",
      SHUTDOWN_TIMEOUT: "100ms",
      HEALTH_INTERVAL: "0",
      STATE_DIR: cwd,
    };
    const first = await startMain(cwd, env);
    procs.push(first);
    const id = newPromptId();
    const job = await postJson(`${first.url("comfy")}/prompt`, promptBody(id, { sim_job_ms: 1500 }));
    expect(job.status).toBe(200);
    await job.text();
    await waitFor(() => sims!.comfy.runningJob(), "ComfyUI running the job");
    // A chat waiting behind the job keeps a request open, so a SIGTERM's stop runs out of time.
    const waiting = postJson(`${first.url("ollama")}/api/chat`, chatBody).catch(() => "cut");
    await waitFor(async () => ((await (await fetch(`${first.url("ollama")}/turnstile/status`)).json()) as StatusDoc).llm.waiting, "the chat waiting");

    await first.kill(signal);
    await waiting;
    if (signal === "SIGTERM") {
      expect(first.stderr()).toContain("still open after SHUTDOWN_TIMEOUT");
      expect(first.stderr()).toContain("a restart picks up what the card is doing");
    }
    expect(sims.comfy.runningJob()?.id).toBe(id);

    const second = await startMain(cwd, env);
    procs.push(second);
    // Its very first answer: the card is ComfyUI's.
    expect(((await (await fetch(`${second.url("ollama")}/healthz`)).json()) as { state: string }).state).toBe("image");
    expect(second.stderr()).toMatch(new RegExp(`picked up 1 ComfyUI job\\(s\\).*${id}`));
    const chat = await postJson(`${second.url("ollama")}/api/chat`, chatBody);
    expect(chat.status).toBe(200);
    await chat.text();

    const ended = sims.comfy.jobs().find((j) => j.id === id)!.endedAt!;
    const freeAt = callsTo(sims.comfy.calls, "/free").at(-1)!.at;
    expect(freeAt).toBeGreaterThanOrEqual(ended);
    expect(callsTo(sims.ollama.calls, "/api/chat").at(-1)!.at).toBeGreaterThan(freeAt);
    expect(gpu.overlaps()).toEqual([]);
  }, 15_000);
}
