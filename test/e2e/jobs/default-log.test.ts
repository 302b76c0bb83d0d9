/**
 * What README.md ("Run") says the log shows is what it shows, at the default level: a chat and an
 * image job through real sockets leave the upstreams' "is up" and ONE summary line for the job —
 * no request lines, no phase lines. JSON logs carry the same summary with numbers in ms.
 */
import { afterEach, expect, test } from "bun:test";
import { defaultText, SETTINGS } from "../../../src/config/settings.ts";
import { chat, newPromptId, promptBody, type Stack, startStack, submit } from "./helpers.ts";

let s: Stack | undefined;
afterEach(async () => {
  await s?.stop();
  s = undefined;
});

/** A chat, then an image job, both answered; resolves once the job's bookkeeping is done. */
async function chatAndImage(stack: Stack, promptId: string): Promise<void> {
  const c = await chat(stack.t);
  expect(c.status).toBe(200);
  await c.text();
  const r = await submit(stack.t, promptBody(promptId));
  expect(r.status).toBe(200);
  await r.text();
  await stack.t.settled();
}

test("the default level is warn", () => {
  expect(defaultText(SETTINGS.find((d) => d.key === "LOGLEVEL")!, { os: "linux", arch: "x64" })).toBe("warn");
});

test("at the default level: upstreams up, one summary per image job with its times, nothing per request", async () => {
  s = await startStack({ env: { LOGLEVEL: "warn" } });
  const id = newPromptId();
  await chatAndImage(s, id);

  const lines = s.t.logLines.map((l) => l.replace(/^\S+ /, "")); // drop the timestamp
  const summary = new RegExp(
    `^NOTE  image job (\\d+) completed; GPU released job=\\1 prompt_id=${id} outcome=completed wait=\\S+ unload=\\S+ job_ms=\\S+ free=\\S+ held=\\S+\\n$`,
  );
  expect(lines.filter((l) => summary.test(l))).toHaveLength(1);
  expect(lines.filter((l) => /^NOTE  (ollama|comfy) is up version=/.test(l))).toHaveLength(2);
  // A quiet service: nothing else, neither the chat nor the job's phases.
  expect(lines.filter((l) => !summary.test(l) && !/ is up /.test(l))).toEqual([]);
});

test("LOG_FORMAT=json: the summary's durations are numbers in ms", async () => {
  s = await startStack({ env: { LOGLEVEL: "warn", LOG_FORMAT: "json" } });
  const id = newPromptId();
  await chatAndImage(s, id);
  const objects = s.t.logLines.map((l) => JSON.parse(l) as Record<string, unknown>);
  const summary = objects.filter((o) => o.prompt_id === id);
  expect(summary).toHaveLength(1);
  expect(summary[0]).toMatchObject({ level: "notice", outcome: "completed" });
  for (const k of ["wait_ms", "unload_ms", "job_ms", "free_ms", "held_ms"]) expect(typeof summary[0]![k]).toBe("number");
  // The simulated job runs 40 ms: the job time is in ms, not seconds.
  expect(summary[0]!.job_ms as number).toBeGreaterThanOrEqual(40);
  for (const o of objects) for (const v of Object.values(o)) expect(String(v)).not.toMatch(/^\d+(\.\d+)?(ms|s|MiB|GiB|KiB)$/);
});

test("at info: request lines name the client and the LLM request's model", async () => {
  s = await startStack({ env: { LOGLEVEL: "info" } });
  const c = await chat(s.t, "qwen2.5:7b");
  await c.text();
  await s.t.settled();
  const done = s.t.logLines.filter((l) => l.includes("<-- 200 POST /api/chat"));
  expect(done).toHaveLength(1);
  expect(done[0]).toContain(" client=127.0.0.1 model=qwen2.5:7b listener=ollama class=llm");
  expect(s.t.logLines.find((l) => l.includes("--> POST /api/chat"))).toContain(" client=127.0.0.1 ");
});
