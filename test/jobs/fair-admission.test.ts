/** An image job's arrival under issue 30 (jobs/fair-admission.ts), shared by every image kind; and a sync job's log word. */
import { describe, expect, test } from "bun:test";
import { DEFAULT_CLASS, identify, parseClients } from "../../src/fair/identity.ts";
import { ClientQuota } from "../../src/fair/quota.ts";
import { admitImageJob, type FairJobs } from "../../src/jobs/fair-admission.ts";
import { GpuTime } from "../../src/fair/gpu-time.ts";
import type { Identity } from "../../src/fair/identity.ts";
import { GpuMeter } from "../../src/jobs/gpu-meter.ts";
import { routeWord } from "../../src/tenants/sync-job.ts";

const rules = (() => {
  const p = parseClients("render batch key=sk-render-01234 images=1\n", ["interactive", DEFAULT_CLASS, "batch"]);
  if (!p.ok) throw new Error(p.message);
  return p.rules;
})();

function fair(limit: number, fairTurns = true): FairJobs & { refusedBy: string[] } {
  const refusedBy: string[] = [];
  return { identify: (seen) => identify(seen, rules), fairTurns, quota: { slots: new ClientQuota(), limit, retryAfterS: () => 7, refused: (who) => void refusedBy.push(who.client) }, refusedBy };
}

describe("admitImageJob", () => {
  test("past the quota: 429 with Retry-After and the client's name, never its key; a slot given back lets the next in", () => {
    const f = fair(2);
    const seen = { authorization: "Bearer sk-alice-secret", address: "10.0.0.4" };
    const a = admitImageJob(f, seen);
    const b = admitImageJob(f, seen);
    expect(a.ok && b.ok).toBe(true);
    const c = admitImageJob(f, seen);
    expect(c).toMatchObject({ ok: false, reply: { status: 429, type: "quota_exceeded", headers: { "retry-after": "7" } } });
    expect(!c.ok && c.reply.message).toMatch(/^gpu-turnstile: client key-[0-9a-f]{8} already has 2 image jobs waiting or running \(its quota\); retry in 7 s$/);
    expect(JSON.stringify(c)).not.toContain("sk-alice");
    expect(f.refusedBy).toHaveLength(1);
    // Another address, no key: another client, not held to alice's count.
    expect(admitImageJob(f, { address: "10.0.0.5" }).ok).toBe(true);
    if (a.ok) a.slot?.release();
    if (a.ok) a.slot?.release(); // idempotent: one slot back, not two
    expect(admitImageJob(f, seen).ok).toBe(true);
    expect(admitImageJob(f, seen).ok).toBe(false);
  });

  test("past its GPU seconds a job is refused first, taking no slot of the jobs-at-once quota; another client is let in", () => {
    const ledger = new GpuTime<Identity>(3600_000);
    let now = 0;
    const f = { ...fair(5), gpuMeter: new GpuMeter({ ledger, limitS: () => 2, now: () => now, onRefused: () => {} }) };
    const seen = { authorization: "Bearer sk-render-01234" };
    const render = identify(seen, rules);
    ledger.begin(render.client, 0, render).end(3000);
    now = 3000;
    const r = admitImageJob(f, seen);
    expect(r).toMatchObject({ ok: false, reply: { status: 429, type: "quota_exceeded" } });
    expect(!r.ok && r.reply.message).toContain("client render used 3 s of GPU time");
    // Its one image slot (images=1) was not taken by the refusal.
    expect(f.quota!.slots.held("render")).toBe(0);
    expect(admitImageJob(f, { address: "10.0.0.9" }).ok).toBe(true);
  });

  test("a client's own images=N wins over the setting", () => {
    const f = fair(5);
    const seen = { authorization: "Bearer sk-render-01234" };
    expect(admitImageJob(f, seen).ok).toBe(true);
    const second = admitImageJob(f, seen);
    expect(!second.ok && second.reply.message).toContain("client render already has 1 image jobs");
  });

  test("the fair turn names the client and its class; FAIR_TURNS=false or no identity = first come, first served", () => {
    const on = admitImageJob(fair(0), { authorization: "Bearer sk-render-01234", address: "10.0.0.4" });
    expect(on.ok && on.turn(12)).toEqual({ client: "render", cls: "batch", tag: 12 });
    expect(on.ok && on.slot).toBeDefined();
    const off = admitImageJob(fair(0, false), { address: "10.0.0.4" });
    expect(off.ok && off.turn(12)).toBeUndefined();
    const none = admitImageJob({}, { address: "10.0.0.4" });
    expect(none).toMatchObject({ ok: true, who: undefined, slot: undefined });
    expect(none.ok && none.turn(1)).toBeUndefined();
  });
});

test("a sync job is named in the log by its route's last segment, as the kind calls it", () => {
  expect(routeWord("/sdapi/v1/txt2img")).toBe("txt2img");
  expect(routeWord("/sdapi/v1/txt2im%67")).toBe("txt2img");
  expect(routeWord("/API/GenerateText2Image")).toBe("GenerateText2Image");
  expect(routeWord("/bad%zz")).toBe("bad%zz");
  expect(routeWord("/")).toBe("/");
});
