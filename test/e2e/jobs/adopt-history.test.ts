/**
 * A job picked up at start keeps its history (issue 27 point 4): its age counts from when ComfyUI
 * began running it, not from the restart, taken from the jobs API's `execution_start_time` where
 * ComfyUI has one, else from what the last run kept under STATE_DIR; and it keeps ComfyUI's number.
 */
import { afterEach, beforeEach, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { StatusDoc } from "../../../src/status/model.ts";
import { startTestTurnstile, type TestTurnstile } from "../../support/turnstile.ts";
import { newPromptId, postJson, promptBody, type Stack, startStack, submit, until, waitFor } from "./helpers.ts";

let s: Stack | undefined;
let extra: TestTurnstile | undefined;
let stateDir: string;
beforeEach(() => {
  stateDir = mkdtempSync(join(tmpdir(), "turnstile-state-"));
});
afterEach(async () => {
  await extra?.close();
  await s?.stop();
  s = extra = undefined;
  rmSync(stateDir, { recursive: true, force: true });
});

const statusOf = async (base: string) => (await (await fetch(`${base}/turnstile/status`)).json()) as StatusDoc;
/** How long the sim's running job has run, by its own clock (epoch ms). */
const ranFor = (st: Stack | { comfy: Stack["comfy"] }) => Date.now() - (st.comfy!.runningJob()?.startedAt ?? Date.now());

test("ComfyUI with the jobs API: the run's start is its execution_start_time, and its number is ComfyUI's", async () => {
  let id = "";
  let startedAt = 0;
  s = await startStack({
    env: { LOGLEVEL: "warn" },
    beforeStart: async ({ comfy }) => {
      // Two jobs before it, so ComfyUI's number for it (2) is not one the turnstile could make up.
      for (const ms of [1, 1]) await (await postJson(`${comfy!.url}/prompt`, promptBody(newPromptId(), { sim_job_ms: ms }))).text();
      id = newPromptId();
      await (await postJson(`${comfy!.url}/prompt`, promptBody(id, { sim_job_ms: 5000 }))).text();
      await waitFor(() => comfy!.runningJob()?.id === id, "ComfyUI running the job");
      await until(() => ranFor({ comfy }) >= 700, "the job running for a while before the start");
      startedAt = comfy!.runningJob()!.startedAt!;
    },
  });
  // Named once Ollama is emptied for it (until then it is the session's opener, with no prompt_id).
  const running = await waitFor(async () => ((await statusOf(s!.t.comfyUrl)).image.running?.prompt_id === id ? (await statusOf(s!.t.comfyUrl)).image.running : undefined), "the adopted job in the status");
  expect(running.number).toBe(2);
  expect(Math.abs(running.running_since! - startedAt)).toBeLessThan(50);
  expect(running.age_ms).toBeGreaterThanOrEqual(700);
  await postJson(`${s.t.comfyUrl}/interrupt`, {});
  await s.t.settled();
  expect(s.gpu.overlaps()).toEqual([]);
});

test("ComfyUI v0.3.64 (no jobs API): the start the last run kept under STATE_DIR", async () => {
  s = await startStack({ comfy: { legacy: true }, env: { STATE_DIR: stateDir, LOGLEVEL: "warn", HISTORY_POLL_INTERVAL: "20ms" } });
  const id = newPromptId();
  const res = await submit(s.t, promptBody(id, { sim_job_ms: 5000 }));
  expect(res.status).toBe(200);
  await res.text();
  const seen = await waitFor(async () => (await statusOf(s!.t.comfyUrl)).image.running?.running_since, "the job seen running");
  await until(() => ranFor(s!) >= 700, "the job running for a while before the restart");
  await s.t.close();

  const t = (extra = startTestTurnstile({ OLLAMA_URL: s.ollama!.url, COMFY_URL: s.comfy!.url, STATE_DIR: stateDir, LOGLEVEL: "warn" }));
  await t.probed;
  const running = await waitFor(async () => ((await statusOf(t.comfyUrl)).image.running?.prompt_id === id ? (await statusOf(t.comfyUrl)).image.running : undefined), "the adopted job in the status");
  expect(running.number).toBe(0);
  expect(Math.abs(running.running_since! - seen)).toBeLessThan(20); // the status and the kept file each read the clock
  expect(running.age_ms).toBeGreaterThanOrEqual(700);
  await postJson(`${t.comfyUrl}/interrupt`, {});
  await t.settled();
  expect(s.gpu.overlaps()).toEqual([]);
});
