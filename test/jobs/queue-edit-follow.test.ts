/**
 * A pending job a client deletes through the turnstile (issue 27 point 3), at the follower, against
 * a fake ComfyUI v0.3.64 (no jobs API) whose /queue reads the test controls: the follower's last
 * shared /queue read, made just before the delete, still shows the job pending. The delete must be
 * judged on a read made after it (`cancelled`), not on that one (which spent the mark, and two
 * later misses made the job `lost`).
 */
import { expect, test } from "bun:test";
import type { ComfyClient, QueueView } from "../../src/comfy/client.ts";
import { followJob } from "../../src/jobs/follow.ts";
import { Nudges } from "../../src/jobs/nudge.ts";
import { SharedQueue } from "../../src/jobs/queue-share.ts";
import { until } from "../support/turnstile.ts";

test("a pending job deleted just after a shared /queue read ends cancelled, not lost", async () => {
  let deleted = false;
  let reads = 0;
  const comfy = {
    job: async () => "unsupported" as const,
    queue: async (): Promise<QueueView> => {
      reads++;
      return { running: ["other"], pending: deleted ? [] : ["b"] };
    },
    // A deleted pending job writes no history (api-facts R5).
    history: async () => undefined,
  } as unknown as ComfyClient;
  const nudges = new Nudges();
  const followed = followJob(comfy, "b", { timeoutMs: 60_000, pollMs: 400, queue: new SharedQueue(comfy), nudges });
  await until(() => reads === 1, "the follower's first look");
  // The client's delete, answered by ComfyUI, then the nudge (proxy/comfy-cancels.ts) — within half
  // a poll of the last read, which a follower may otherwise take as fresh.
  deleted = true;
  nudges.nudge(["b"]);
  expect((await followed).end).toBe("cancelled");
});
