/** CLIENT_IDLE_TIMEOUT's sweep (proxy/idle-sweep.ts): at a quiet moment, or forced when never quiet. */
import { expect, test } from "bun:test";
import { FORCE_AFTER, sweepIdleConnections, type Activity } from "../../../src/proxy/idle-sweep.ts";
import { until } from "../../support/turnstile.ts";

function fakeServer(idle: number) {
  return { sweeps: 0, pendingRequests: 0, closeIdleConnections() { this.sweeps++; return idle; } };
}

test("a quiet listener is swept once per period; a busy one waits, and is swept anyway after FORCE_AFTER periods", async () => {
  let now = 0;
  const quiet = fakeServer(3);
  const busy = fakeServer(0);
  const closed: number[] = [];
  const activity: Activity = { lastRequestAt: -Infinity };
  const busyActivity: Activity = { lastRequestAt: 0 };
  const stops = [sweepIdleConnections(quiet, activity, 100, (n) => closed.push(n), () => now), sweepIdleConnections(busy, busyActivity, 100, () => {}, () => now)];
  busy.pendingRequests = 1;
  try {
    now = 99;
    await Bun.sleep(60);
    expect({ quiet: quiet.sweeps, busy: busy.sweeps }).toEqual({ quiet: 0, busy: 0 });
    now = 100;
    await until(() => quiet.sweeps === 1, "the quiet listener swept");
    expect(closed).toEqual([3]);
    for (now = 100; now < FORCE_AFTER * 100; now += 100) {
      busyActivity.lastRequestAt = now;
      await Bun.sleep(30);
      expect(busy.sweeps).toBe(0);
    }
    now = FORCE_AFTER * 100;
    await until(() => busy.sweeps === 1, "the busy listener swept anyway");
  } finally {
    for (const stop of stops) stop();
  }
});

test("0 turns it off", () => {
  const server = fakeServer(1);
  sweepIdleConnections(server, { lastRequestAt: 0 }, 0, () => {})();
  expect(server.sweeps).toBe(0);
});
