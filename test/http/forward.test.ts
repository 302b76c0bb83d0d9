import { describe, expect, test } from "bun:test";
import { onBodyDone, targetUrl, whenBodyDone } from "../../src/http/forward.ts";
import { IdleTicker, IdleTimeoutError } from "../../src/http/idle-watch.ts";
import type { BodyEnd } from "../../src/upstream/h1-pool.ts";

describe("targetUrl", () => {
  test.each([
    ["http://127.0.0.1:11434", "http://t:1/api/chat", "http://127.0.0.1:11434/api/chat"],
    ["http://127.0.0.1:11434/", "http://t:1/api/chat?stream=false", "http://127.0.0.1:11434/api/chat?stream=false"],
    ["http://10.0.0.2:8188/comfy", "http://t:1/prompt", "http://10.0.0.2:8188/comfy/prompt"],
    ["http://10.0.0.2:8188/comfy/", "http://t:1/view?filename=a%20b.png&type=output", "http://10.0.0.2:8188/comfy/view?filename=a%20b.png&type=output"],
    ["https://gpu.example/base/", "http://t:1/", "https://gpu.example/base/"],
    ["http://[::1]:8188", "http://t:1/api/view?x=1&x=2", "http://[::1]:8188/api/view?x=1&x=2"],
    ["http://h:1", "http://t:1/a%2Fb", "http://h:1/a%2Fb"],
  ])("%s + %s → %s", (up, incoming, want) => {
    expect(targetUrl(new URL(up), new URL(incoming))).toBe(want);
  });

  test("the client's fragment is not part of the target", () => {
    expect(targetUrl(new URL("http://127.0.0.1:1/p"), new URL("http://t:1/x?q#frag"))).toBe("http://127.0.0.1:1/p/x?q");
  });
});

const enc = new TextEncoder();

function counter() {
  const c = { calls: 0, done: () => void c.calls++ };
  return c;
}

/** A hand-driven upstream body. */
function upstream() {
  let ctrl!: ReadableStreamDefaultController<Uint8Array>;
  const cancelled: unknown[] = [];
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      ctrl = c;
    },
    cancel(reason) {
      cancelled.push(reason);
    },
  });
  return { stream, ctrl, cancelled };
}

describe("onBodyDone", () => {
  test("with no body, done runs at once", () => {
    const c = counter();
    expect(onBodyDone(null, c.done)).toBeNull();
    expect(c.calls).toBe(1);
  });

  test("done runs once, only after the last byte was read", async () => {
    const c = counter();
    const up = upstream();
    const out = onBodyDone(up.stream, c.done)!;
    const reader = out.getReader();
    up.ctrl.enqueue(enc.encode("line 1\n"));
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("line 1\n");
    expect(c.calls).toBe(0);
    up.ctrl.enqueue(enc.encode("line 2\n"));
    expect((await reader.read()).done).toBe(false);
    expect(c.calls).toBe(0);
    up.ctrl.close();
    expect((await reader.read()).done).toBe(true);
    expect(c.calls).toBe(1);
    await reader.closed;
    expect(c.calls).toBe(1);
  });

  test("the body passes through byte for byte", async () => {
    const c = counter();
    const data = Uint8Array.from({ length: 5000 }, (_, i) => i & 0xff);
    const out = onBodyDone(new Response(data).body, c.done)!;
    expect(new Uint8Array(await new Response(out).arrayBuffer())).toEqual(data);
    expect(c.calls).toBe(1);
  });

  test("a client that goes away runs done once and cancels the upstream body", async () => {
    const c = counter();
    const up = upstream();
    const out = onBodyDone(up.stream, c.done)!;
    const reader = out.getReader();
    up.ctrl.enqueue(enc.encode("partial"));
    await reader.read();
    await reader.cancel("client gone");
    expect(c.calls).toBe(1);
    expect(up.cancelled).toEqual(["client gone"]);
    await reader.cancel("again").catch(() => {});
    expect(c.calls).toBe(1);
  });

  test("a cancel before any read runs done", async () => {
    const c = counter();
    const up = upstream();
    await onBodyDone(up.stream, c.done)!.cancel();
    expect(c.calls).toBe(1);
  });

  test("an upstream error runs done once and reaches the client", async () => {
    const c = counter();
    const up = upstream();
    const out = onBodyDone(up.stream, c.done)!;
    const reader = out.getReader();
    const boom = new Error("upstream reset");
    up.ctrl.error(boom);
    await expect(reader.read()).rejects.toBe(boom);
    expect(c.calls).toBe(1);
    await reader.cancel().catch(() => {});
    expect(c.calls).toBe(1);
  });

  test("nothing is read from upstream before the client asks", async () => {
    let pulls = 0;
    const src = new ReadableStream<Uint8Array>(
      {
        pull(ctrl) {
          pulls++;
          ctrl.enqueue(enc.encode("x"));
        },
      },
      { highWaterMark: 0 },
    );
    const out = onBodyDone(src, () => {})!;
    await Promise.resolve();
    expect(pulls).toBe(0);
    const reader = out.getReader();
    await reader.read();
    expect(pulls).toBe(1);
    await reader.cancel();
  });
});

describe("onBodyDone: what it reports (the fetch path's request log and idle watch)", () => {
  test("done hears the bytes handed on, and an upstream error as a cut by the upstream", async () => {
    const ends: BodyEnd[] = [];
    const up = upstream();
    const reader = onBodyDone(up.stream, (e) => ends.push(e))!.getReader();
    up.ctrl.enqueue(enc.encode("12345"));
    await reader.read();
    up.ctrl.error(new Error("connection reset mid-body"));
    await expect(reader.read()).rejects.toThrow("connection reset mid-body");
    expect(ends).toEqual([{ bytes: 5, cut: { by: "upstream", reason: "connection reset mid-body" } }]);
  });

  test("a complete body reports its size and no cut; a client that leaves, a cut by the client", async () => {
    const ends: BodyEnd[] = [];
    const whole = onBodyDone(new Response("abcdef").body, (e) => ends.push(e))!;
    expect(await new Response(whole).text()).toBe("abcdef");
    const up = upstream();
    await onBodyDone(up.stream, (e) => ends.push(e))!.cancel("bye");
    expect(ends).toEqual([{ bytes: 6 }, { bytes: 0, cut: { by: "client", reason: "the client went away" } }]);
  });

  test("every piece read marks the activity", async () => {
    const activity = { moved: false, clientBlocked: false };
    const up = upstream();
    const reader = onBodyDone(up.stream, () => {}, { activity })!.getReader();
    up.ctrl.enqueue(enc.encode("a"));
    await reader.read();
    expect(activity.moved).toBe(true);
    activity.moved = false;
    up.ctrl.enqueue(enc.encode("b"));
    await reader.read();
    expect(activity.moved).toBe(true);
    await reader.cancel();
  });
});

describe("whenBodyDone on a fetch body with an idle watch (LLM_IDLE_TIMEOUT on https upstreams)", () => {
  test("an upstream that goes quiet mid-answer: the watch fires, the slot is released, the client's body is cut", async () => {
    const ticker = new IdleTicker(1000, false);
    const fired: string[] = [];
    const watch = ticker.watch((r) => fired.push(r));
    let released = 0;
    const hold = watch.arm({ release: () => void released++ });
    watch.stage = "response";
    const up = upstream();
    const ends: BodyEnd[] = [];
    const res = whenBodyDone(new Response(up.stream), new AbortController().signal, (e) => (hold.release(), ends.push(e)), watch);
    const reader = res.body!.getReader();
    up.ctrl.enqueue(enc.encode("first token"));
    await reader.read();

    // The bytes kept it alive through the first tick; ten quiet ticks (1 s) end it.
    ticker.tick();
    for (let i = 0; i < 9; i++) ticker.tick();
    expect(fired).toEqual([]);
    ticker.tick();
    expect(fired).toEqual(["upstream_stalled"]);
    expect(released).toBe(1);
    expect(ticker.size).toBe(0);
    await expect(reader.read()).rejects.toThrow(IdleTimeoutError);
    expect(ends).toHaveLength(1);
    expect(ends[0]!.cut?.by).toBe("signal");
    expect(up.cancelled).toHaveLength(1);
  });
});
