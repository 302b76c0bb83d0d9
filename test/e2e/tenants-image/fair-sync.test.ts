/**
 * Fair turns for the image kinds whose request is the job (issue 30 for IMAGE_KIND a1111 and
 * swarmui), through the real turnstile and the simulators: one client's batch of generations no
 * longer keeps another client's single one waiting behind all of it; the batch still runs as one
 * image session; quotas answer in the tenant's own error shape; the waiting generations have a
 * place in line. The ledger must show no moment where both sides held the card.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { IMAGE_KIND_SIMS } from "../../../src/sim/image-kinds.ts";
import type { LineClient } from "../../../src/status/line.ts";
import { until } from "../../support/turnstile.ts";
import { type Rig, startRig, stopRig, type SyncKind as Kind } from "./rig.ts";

let rig: Rig | undefined;
let dir: string | undefined;
afterEach(async () => {
  const r = rig;
  rig = undefined;
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
  await stopRig(r);
});

async function start(kind: Kind, env: Record<string, string> = {}): Promise<Rig> {
  rig = await startRig(kind, { jobMs: 60 }, env);
  return rig;
}

const GENERATION: Record<Kind, string> = { a1111: "/sdapi/v1/txt2img", swarmui: "/API/GenerateText2Image" };
const key = (name: string) => ({ authorization: `Bearer sk-${name}-0123456789` });

/** The prompts of the generations that reached the image server, in the order they arrived. */
const sentPrompts = (r: Rig, kind: Kind) => r.image.calls.filter((c) => c.method === "POST" && c.path === GENERATION[kind]).map((c) => JSON.parse(c.bodyText).prompt as string);

function generate(r: Rig, kind: Kind, who: string, prompt: string): Promise<Response> {
  return IMAGE_KIND_SIMS[kind].generate(r.t.comfyUrl, { headers: key(who), prompt });
}

async function lineOf(r: Rig, who: string): Promise<LineClient[]> {
  const doc = (await (await fetch(`${r.t.comfyUrl}/turnstile/status`, { headers: key(who) })).json()) as { line?: LineClient[] };
  return doc.line ?? [];
}

for (const kind of ["a1111", "swarmui"] as const) {
  describe(`IMAGE_KIND=${kind}: fair turns`, () => {
    test("one client queues six generations, another sends one: the other's runs right after the one running; still one session; a place in line", async () => {
      const r = await start(kind);
      // The LLM side holds the card first: the batch's session has a hand-over to open.
      expect((await fetch(`${r.t.ollamaUrl}/api/chat`, { method: "POST", body: JSON.stringify({ model: "llama3.2", messages: [{ role: "user", content: "hi" }], stream: false }) })).status).toBe(200);
      const answers = Array.from({ length: 6 }, (_, i) => generate(r, kind, "alice", `alice ${i}`));
      await until(() => sentPrompts(r, kind).length === 1 && r.t.status.snapshot(false).image.jobs.length === 6, "alice's first generation sent, all six received");

      // Her place in line: the five not yet in the session, as the lock will take them; nobody else's.
      const hers = await lineOf(r, "alice");
      expect(hers).toHaveLength(1);
      expect(hers[0]!.client).toMatch(/^key-[0-9a-f]{8}$/);
      expect(hers[0]!.jobs.map((j) => j.position)).toEqual([1, 2, 3, 4, 5]);
      expect(await lineOf(r, "bob")).toEqual([]);

      answers.push(generate(r, kind, "bob", "bob"));
      const statuses = await Promise.all(answers.map((a) => a.then(async (res) => (await res.text(), res.status))));
      expect(statuses).toEqual(statuses.map(() => 200));
      await r.t.settled();

      // Bob's generation went second: behind the one of Alice's that was running, not behind six.
      const sent = sentPrompts(r, kind);
      expect(sent).toHaveLength(7);
      expect(sent[1]).toBe("bob");
      // One session: the image side was handed the card once and released once.
      expect(r.gpu.ledger.map((h) => h.tenant)).toEqual(["ollama", "comfy"]);
      expect(r.gpu.overlaps()).toEqual([]);
      // The log says what the kind calls the job, not ComfyUI's "prompt".
      const word = GENERATION[kind].split("/").at(-1)!;
      const log = r.t.logLines.join("");
      expect(log).toContain(`: ${word} success`);
      expect(log).not.toMatch(/image job \d+: prompt /);
    });

    test("QUOTA_IMAGE_JOBS=2: a client's third generation is refused on arrival with 429 and Retry-After in the tenant's own shape; the accepted ones run; another client is not held to it", async () => {
      const r = await start(kind, { QUOTA_IMAGE_JOBS: "2" });
      const first = [0, 1].map((i) => generate(r, kind, "alice", `alice ${i}`));
      await until(() => sentPrompts(r, kind).length === 1 && r.t.status.snapshot(false).image.jobs.length === 2, "alice's two generations accepted");
      const refused = await generate(r, kind, "alice", "alice refused");
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      const body = (await refused.json()) as Record<string, unknown>;
      if (kind === "a1111") expect(body).toMatchObject({ error: "quota_exceeded", detail: expect.stringContaining("already has 2 image jobs") });
      else expect(body).toMatchObject({ error_id: "quota_exceeded", error: expect.stringContaining("already has 2 image jobs") });
      expect(JSON.stringify(body)).not.toContain("sk-alice");
      const bob = await generate(r, kind, "bob", "bob");
      expect(bob.status).toBe(200);
      expect((await Promise.all(first.map(async (a) => (await a).status)))).toEqual([200, 200]);
      await r.t.settled();
      expect(sentPrompts(r, kind)).not.toContain("alice refused");
      expect(sentPrompts(r, kind)).toHaveLength(3);
      // Her jobs over, her slots are back.
      expect((await generate(r, kind, "alice", "alice again")).status).toBe(200);
      await r.t.settled();
      expect(r.gpu.overlaps()).toEqual([]);
    });
  });
}

test("IMAGE_KIND=a1111: a client's own images=N in CLIENTS_FILE (by its key) wins over QUOTA_IMAGE_JOBS, and names it", async () => {
  dir = mkdtempSync(join(tmpdir(), "gt-clients-"));
  const file = join(dir, "clients");
  writeFileSync(file, `render batch key=sk-render-0123456789 images=1\n`);
  const r = await start("a1111", { QUOTA_IMAGE_JOBS: "5", CLIENTS_FILE: file });
  const one = generate(r, "a1111", "render", "render 1");
  await until(() => sentPrompts(r, "a1111").length === 1, "render's first generation sent");
  const two = await generate(r, "a1111", "render", "render 2");
  expect(two.status).toBe(429);
  expect(((await two.json()) as { detail: string }).detail).toContain("client render already has 1 image jobs");
  expect((await one).status).toBe(200);
  await r.t.settled();
});

test("IMAGE_KIND=a1111: a client that gives up while its generation waits gets its quota slot back, and its job never reaches A1111", async () => {
  const r = await start("a1111", { QUOTA_IMAGE_JOBS: "1" });
  const bob = IMAGE_KIND_SIMS.a1111.generate(r.t.comfyUrl, { headers: key("bob"), prompt: "bob", jobMs: 300 });
  await until(() => sentPrompts(r, "a1111").length === 1, "bob's generation running");
  const gone = new AbortController();
  const waiting = IMAGE_KIND_SIMS.a1111.generate(r.t.comfyUrl, { headers: key("alice"), prompt: "alice gone", signal: gone.signal }).catch(() => undefined);
  await until(() => r.t.status.snapshot(false).image.jobs.length === 2, "alice's generation waiting");
  gone.abort();
  await waiting;
  await until(() => r.t.status.snapshot(false).image.jobs.length === 1, "alice's job gone");
  const again = await generate(r, "a1111", "alice", "alice again");
  expect(again.status).toBe(200);
  expect((await bob).status).toBe(200);
  await r.t.settled();
  expect(sentPrompts(r, "a1111")).toEqual(["bob", "alice again"]);
  expect(r.gpu.overlaps()).toEqual([]);
});
