/**
 * Issue 26, point 10: both upstreams down. An Ollama on this machine that refuses connections holds
 * no memory, so an image job does not spend UNLOAD_TIMEOUT on it (once per attempt); the job gets
 * its 502 within UPSTREAM_RETRY_TIMEOUT saying how long it really tried, /readyz?class=image says
 * the card cannot serve images (503 upstream_down) rather than "busy", and the lock ends idle.
 */
import { afterEach, expect, test } from "bun:test";
import { chat, newPromptId, promptBody, type Stack, startStack, submit, warnLines } from "./helpers.ts";

let s: Stack | undefined;
afterEach(async () => {
  await s?.stop();
  s = undefined;
});

const RETRY_MS = 1000;

test("Ollama and ComfyUI both refuse: the job's 502 comes within UPSTREAM_RETRY_TIMEOUT, /readyz says upstream_down, the lock ends idle", async () => {
  // HEALTH_INTERVAL 1h: the last probe saw both up, as in the minutes after they die.
  s = await startStack({ env: { UNLOAD_TIMEOUT: "5s", UPSTREAM_RETRY_TIMEOUT: `${RETRY_MS}ms`, BACKOFF_INITIAL: "20ms", BACKOFF_MAX: "80ms", HEALTH_INTERVAL: "1h", LOGLEVEL: "info" } });
  // A chat went through: the blind unload's memory names a model, so an unreadable /api/ps is not "nothing to do".
  await (await chat(s.t)).text();
  await s.ollama!.stop();
  await s.comfy!.stop();

  const t0 = performance.now();
  const job = submit(s.t, promptBody(newPromptId()));
  let answeredAt: number | undefined;
  void job.then(() => (answeredAt = performance.now()));
  // Each answer, and whether ComfyUI's first refusal had been seen when it was asked: before it
  // (the first attempt's few milliseconds) the card cannot know, and the job does hold it.
  const readyz: { answer: string; afterRefusal: boolean }[] = [];
  while (answeredAt === undefined) {
    const afterRefusal = warnLines(s.t, "ComfyUI unavailable, retrying").length > 0;
    const r = await fetch(`${s.t.comfyUrl}/readyz?class=image`);
    readyz.push({ answer: `${r.status} ${((await r.json()) as { reason: string }).reason}`, afterRefusal });
    await new Promise((r) => setTimeout(r, 10));
  }
  const res = await job;
  expect(res.status).toBe(502);
  // Within UPSTREAM_RETRY_TIMEOUT of the first refusal (the test's slack is for a loaded machine),
  // and far from one UNLOAD_TIMEOUT per attempt.
  expect(answeredAt - t0).toBeLessThan(RETRY_MS + 900);
  const message = ((await res.json()) as { error: { message: string } }).error.message;
  const tried = /gave up after trying for ([\d.]+)(ms|s) \((\d+) attempts; UPSTREAM_RETRY_TIMEOUT is 1s\)/.exec(message);
  expect(tried, message).not.toBeNull();
  const triedMs = Number(tried![1]) * (tried![2] === "s" ? 1000 : 1);
  expect(triedMs).toBeGreaterThanOrEqual(RETRY_MS);
  expect(triedMs).toBeLessThanOrEqual(answeredAt - t0);

  // Never "busy with an image job" once ComfyUI refused: the refusal had the probe look again, "down".
  const after = readyz.filter((r) => r.afterRefusal).map((r) => r.answer);
  expect(after.filter((a) => a.startsWith("429"))).toEqual([]);
  expect(after.filter((a) => a === "503 upstream_down").length).toBeGreaterThan(after.length / 2);
  expect(after.at(-1)).toBe("503 upstream_down");
  expect(s.t.health().upstreams).toEqual({ ollama: "down", comfy: "down" });
  // Each attempt's unload ended at Ollama's refusal, and the log says why.
  expect(warnLines(s.t, "Ollama unload not confirmed")).toEqual([]);
  expect(s.t.logLines.some((l) => l.includes("Ollama not running (refused on this machine), nothing to unload"))).toBe(true);
  await s.t.settled();
  // Reaching UPSTREAM_RETRY_TIMEOUT is in the job's one summary line, which the default level shows.
  const summary = s.t.logLines.filter((l) => l.includes("upstream_error; GPU released"));
  expect(summary).toHaveLength(1);
  expect(summary[0]).toContain("gave up after trying for");
  expect(s.t.lock.state).toBe("idle");
  expect(s.gpu.overlaps()).toEqual([]);
}, 20_000);
