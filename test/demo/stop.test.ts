import { expect, test } from "bun:test";
import { untilStopped } from "../../src/demo/stop.ts";

test.each(["SIGINT", "SIGTERM", "SIGHUP"] as const)("the demo stops, and cleans up, on %s (SIGHUP: the terminal closed)", async (sig) => {
  const before = process.listenerCount(sig);
  const stopped = untilStopped();
  expect(process.listenerCount(sig)).toBe(before + 1);
  process.emit(sig, sig);
  expect(await stopped).toBe(sig);
  // Still absorbed for a moment: a second Ctrl-C during the cleanup does not kill the demo.
  expect(process.listenerCount(sig)).toBe(before + 1);
});
