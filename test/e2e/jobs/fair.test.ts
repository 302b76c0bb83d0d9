/**
 * Fair turns through real sockets (issue 30): one client's batch no longer keeps another client's
 * single image waiting behind all of it, and the batch still runs as one image session (one
 * Ollama unload, one checkpoint load, one /free).
 */
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BindError } from "../../../src/turnstile.ts";
import { startTestTurnstile } from "../../support/turnstile.ts";
import { callsTo, newPromptId, promptBody, type Stack, startStack, submit, until } from "./helpers.ts";

let s: Stack | undefined;
let dir: string | undefined;
afterEach(async () => {
  await s?.stop();
  s = undefined;
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

/** A /prompt body from a ComfyUI client that names itself (as the ComfyUI page does). */
function fromClient(promptId: string, clientId: string): string {
  return JSON.stringify({ ...JSON.parse(promptBody(promptId)), client_id: clientId });
}

const sentIds = (stack: Stack) => callsTo(stack.comfy!.calls, "/prompt").map((c) => JSON.parse(c.bodyText).prompt_id as string);

describe("fair turns", () => {
  test("one client queues six images, another sends one: the other's goes right after the first; still one session", async () => {
    s = await startStack({ comfy: { jobMs: 80 } });
    const batch = Array.from({ length: 6 }, () => newPromptId());
    const answers = batch.map((id) => submit(s!.t, fromClient(id, "alice-tab-1")));
    await until(() => sentIds(s!).length === 1 && s!.t.lock.snapshot().imageWaiting === 5, "alice's first job in ComfyUI, five waiting");
    const single = newPromptId();
    answers.push(submit(s.t, fromClient(single, "bob-tab-1")));
    const statuses = await Promise.all(answers.map((a) => a.then((r) => r.status)));
    expect(statuses.every((x) => x === 200)).toBe(true);
    await s.t.settled();

    // Bob's job was sent second: behind the one of Alice's that ComfyUI already had, not behind six.
    expect(sentIds(s)).toEqual([batch[0]!, single, ...batch.slice(1)]);
    // And the batch still ran as one session.
    expect(callsTo(s.comfy!.calls, "/free")).toHaveLength(1);
    expect(s.gpu.ledger.filter((h) => h.tenant === "comfy")).toHaveLength(1);
    expect(s.transitions.map((x) => `${x.from}->${x.to}`)).toEqual(["idle->image", "image->idle"]);
    expect(s.gpu.overlaps()).toEqual([]);
  });

  test("one client alone: its jobs go to ComfyUI one at a time, in one session", async () => {
    s = await startStack({ comfy: { jobMs: 60 } });
    const ids = Array.from({ length: 4 }, () => newPromptId());
    const statuses = await Promise.all(ids.map((id) => submit(s!.t, promptBody(id)).then((r) => r.status)));
    expect(statuses).toEqual([200, 200, 200, 200]);
    await s.t.settled();
    const ends = s.comfy!.jobs().map((j) => j.endedAt!).sort((a, b) => a - b);
    const prompts = callsTo(s.comfy!.calls, "/prompt");
    // Each /prompt after the first reached ComfyUI once the job before it had ended.
    for (let i = 1; i < prompts.length; i++) expect(prompts[i]!.at).toBeGreaterThanOrEqual(ends[i - 1]!);
    expect(callsTo(s.comfy!.calls, "/free")).toHaveLength(1);
    expect(s.gpu.ledger.filter((h) => h.tenant === "comfy")).toHaveLength(1);
  });

  test("a CLIENTS_FILE line that cannot be read stops the start with the file and line named", () => {
    dir = mkdtempSync(join(tmpdir(), "gt-clients-"));
    const file = join(dir, "clients");
    writeFileSync(file, "# who\nalice interactive key=sk-alice-0123456789\nbob vip cidr=10.0.0.0/8\n");
    let err: unknown;
    try {
      startTestTurnstile({ CLIENTS_FILE: file, COMFY_URL: "http://127.0.0.1:9" });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(BindError);
    expect((err as Error).message).toBe(`CLIENTS_FILE ${file} line 3: client bob: class must be one of interactive, normal, batch, not "vip"`);
    expect((err as Error).message).not.toContain("sk-alice");
  });
});
