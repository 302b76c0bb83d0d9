import { describe, expect, test } from "bun:test";
import { IdleTicker, IdleTimeoutError, type IdleReason } from "../../src/http/idle-watch.ts";

function armed(ticker: IdleTicker, client = new AbortController()) {
  const fired: IdleReason[] = [];
  const watch = ticker.watch((r) => fired.push(r));
  let released = 0;
  const hold = watch.arm({ release: () => void released++ });
  return { watch, hold, fired, released: () => released, client };
}

describe("IdleTicker", () => {
  test("ticks ten times per timeout, at most every 5 s and at least every 10 ms", () => {
    expect(new IdleTicker(1000, false).tickMs).toBe(100);
    expect(new IdleTicker(300_000, false).tickMs).toBe(5000);
    expect(new IdleTicker(20, false).tickMs).toBe(10);
  });

  test("a watch that sees a byte between ticks never fires; one quiet for the whole timeout does", () => {
    const ticker = new IdleTicker(1000, false);
    const busy = armed(ticker);
    const quiet = armed(ticker);
    for (let i = 0; i < 9; i++) {
      busy.watch.moved = true;
      ticker.tick();
    }
    expect([busy.fired, quiet.fired]).toEqual([[], []]);
    busy.watch.moved = true;
    ticker.tick();
    expect([busy.fired, quiet.fired]).toEqual([[], ["no_answer"]]);
    expect(quiet.released()).toBe(1);
    expect(quiet.watch.signalWith(quiet.client.signal).reason).toBeInstanceOf(IdleTimeoutError);
    expect(busy.watch.signalWith(busy.client.signal).aborted).toBe(false);
    expect(ticker.size).toBe(1);
    busy.hold.release();
    expect(ticker.size).toBe(0);
    expect(busy.released()).toBe(1);
  });

  test("the reason says where the exchange stood", () => {
    const cases: [stage: "request" | "waiting" | "response", clientBlocked: boolean, IdleReason][] = [
      ["request", false, "request_body"],
      ["waiting", false, "no_answer"],
      ["response", false, "upstream_stalled"],
      ["response", true, "client_not_reading"],
    ];
    for (const [stage, clientBlocked, want] of cases) {
      const ticker = new IdleTicker(100, false);
      const w = armed(ticker);
      w.watch.stage = stage;
      w.watch.clientBlocked = clientBlocked;
      for (let i = 0; i < 10; i++) ticker.tick();
      expect({ stage, clientBlocked, fired: w.fired }).toEqual({ stage, clientBlocked, fired: [want] });
      expect(w.watch.reason).toBe(want);
    }
  });

  test("a watch counts only while its slot is held: released, it never fires", () => {
    const ticker = new IdleTicker(100, false);
    const w = armed(ticker);
    w.hold.release();
    for (let i = 0; i < 20; i++) ticker.tick();
    expect(w.fired).toEqual([]);
    expect(w.released()).toBe(1);
  });

  test("the client's abort reaches the watch's signal (the fetch path's)", () => {
    const ticker = new IdleTicker(100, false);
    const w = armed(ticker);
    const signal = w.watch.signalWith(w.client.signal);
    w.client.abort(new Error("gone"));
    expect(signal.aborted).toBe(true);
    w.hold.release();
  });

  test("the running exchange is stopped when the watch fires, or at once when it registers after", () => {
    const ticker = new IdleTicker(100, false);
    const w = armed(ticker);
    const stopped: Error[] = [];
    w.watch.stopper = { stop: (e) => void stopped.push(e) };
    for (let i = 0; i < 10; i++) ticker.tick();
    expect(stopped).toHaveLength(1);
    expect(stopped[0]).toBeInstanceOf(IdleTimeoutError);
    // A connection that opened only after the watch fired: its exchange is stopped as it starts.
    w.watch.stopper = { stop: (e) => void stopped.push(e) };
    expect(stopped).toHaveLength(2);
  });
});
