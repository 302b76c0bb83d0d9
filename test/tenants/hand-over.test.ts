/** tenants/hand-over.ts: the verdict comes from the tenant's own report, never from the release's answer. */
import { describe, expect, test } from "bun:test";
import { handOver } from "../../src/tenants/hand-over.ts";
import type { CallOptions, Holding, LlmTenant, ReleaseCall, WorkClass } from "../../src/tenants/types.ts";

/** A tenant made of answers: `reports` are verify's readings in turn (the last repeats). */
function tenant(o: { accepted?: boolean; reports: (Holding | Error)[]; busy?: number[] }) {
  const log: string[] = [];
  let r = 0;
  let b = 0;
  const t: LlmTenant = {
    kind: "t",
    side: "llm",
    label: "T",
    base: new URL("http://127.0.0.1:1"),
    classify: (): WorkClass => "pass",
    async release(_: CallOptions): Promise<ReleaseCall> {
      log.push("release");
      return { tried: ["m"], accepted: o.accepted ?? true, error: o.accepted === false ? "answered 500" : undefined };
    },
    async verify(): Promise<Holding> {
      log.push("verify");
      const x = o.reports[Math.min(r++, o.reports.length - 1)]!;
      if (x instanceof Error) throw x;
      return x;
    },
    resident: async () => [],
    probe: async () => "v",
  };
  if (o.busy) {
    const busy = o.busy;
    t.busy = async () => {
      log.push("busy");
      return busy[Math.min(b++, busy.length - 1)]!;
    };
  }
  return { t, log };
}

const BOUND = { timeoutMs: 150, pollMs: 10, callTimeoutMs: 100 };

describe("handOver", () => {
  test("released once the tenant's own report says so; the release is repeated while it holds", async () => {
    const { t, log } = tenant({ reports: [{ held: true }, { held: true }, { held: false }] });
    const r = await handOver(t, BOUND);
    expect(r.released).toBe(true);
    expect(r.tried).toEqual(["m"]);
    expect(log).toEqual(["release", "verify", "release", "verify", "release", "verify"]);
  });

  test("every release accepted and memory still reported at the bound: lied", async () => {
    const { t } = tenant({ reports: [{ held: true, vramBytes: 9 }] });
    const r = await handOver(t, BOUND);
    expect(r).toMatchObject({ released: false, lied: true, vramAfter: 9 });
    expect(r.error).toContain("T answered the release as done but still reports memory held within its bound (150ms)");
  });

  test("a report that cannot be read is not a lie, and says why", async () => {
    const { t } = tenant({ reports: [{ held: true, unreadable: "/models unreadable: timeout" }] });
    const r = await handOver(t, BOUND);
    expect(r.released).toBe(false);
    expect(r.lied).toBeUndefined();
    expect(r.error).toContain("/models unreadable: timeout");
  });

  test("a last reading cut short does not hide a lie the readings before it showed", async () => {
    const { t } = tenant({ reports: [{ held: true, vramBytes: 7 }, { held: true, unreadable: "timed out" }] });
    const r = await handOver(t, BOUND);
    expect(r).toMatchObject({ released: false, lied: true, vramAfter: 7 });
  });

  test("a reading that fails is read again, not taken as a verdict", async () => {
    const { t, log } = tenant({ reports: [new Error("connection reset"), { held: false }] });
    const r = await handOver(t, BOUND);
    expect(r.released).toBe(true);
    expect(log).toEqual(["release", "verify", "release", "verify"]);
  });

  test("a refused release is not a lie either", async () => {
    const { t } = tenant({ accepted: false, reports: [{ held: true }] });
    const r = await handOver(t, BOUND);
    expect(r.lied).toBeUndefined();
    expect(r.error).toContain("answered 500");
  });

  test("a tenant that is not running holds nothing", async () => {
    const { t } = tenant({ reports: [{ held: false, notRunning: "refused" }] });
    expect(await handOver(t, BOUND)).toMatchObject({ released: true, notRunning: "refused" });
  });

  test("the drain waits for its own work to end before the release", async () => {
    const { t, log } = tenant({ reports: [{ held: false }], busy: [2, 1, 0] });
    expect((await handOver(t, BOUND)).released).toBe(true);
    expect(log).toEqual(["busy", "busy", "busy", "release", "verify"]);
  });

  test("a drain that does not end within its bound releases anyway, with the whole release bound left, and says so", async () => {
    const { t, log } = tenant({ reports: [{ held: true }, { held: false }], busy: [1] });
    const r = await handOver(t, { ...BOUND, drainTimeoutMs: 40 });
    expect(r.released).toBe(true);
    expect(r.error).toContain("T still ran 1 request(s) of its own at the bound (40ms); released anyway");
    expect(log.indexOf("release")).toBeGreaterThan(log.lastIndexOf("busy"));
  });
});
