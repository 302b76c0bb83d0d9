import { describe, expect, test } from "bun:test";
import { prepareBody } from "../../src/http/request-body.ts";
import type { ReplayableBody } from "../../src/http/request-body.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

async function text(b: BodyInit | undefined): Promise<string> {
  if (b === undefined) throw new Error("no body");
  return new Response(b).text();
}

/** A chunked (no Content-Length) POST whose body the test can watch being read. */
function chunkedPost(chunks: string[]) {
  const seen = { pulls: 0 };
  const body = new ReadableStream<Uint8Array>(
    {
      pull(c) {
        const next = chunks[seen.pulls++];
        if (next === undefined) c.close();
        else c.enqueue(enc.encode(next));
      },
    },
    { highWaterMark: 0 },
  );
  const req = new Request("http://127.0.0.1/prompt", { method: "POST", body, duplex: "half" } as RequestInit);
  return { req, seen };
}

describe("prepareBody", () => {
  test("a GET or HEAD has no body", async () => {
    for (const method of ["GET", "HEAD"]) {
      const b = await prepareBody(new Request("http://127.0.0.1/api/tags", { method }), 1024);
      expect(b.next()).toBeUndefined();
      expect(b.replayable).toBe(true);
    }
  });

  test("a POST without a body has none", async () => {
    const b = await prepareBody(new Request("http://127.0.0.1/free", { method: "POST" }), 1024);
    expect(b.next()).toBeUndefined();
  });

  test("a small body with a Content-Length is buffered and can be sent again and again", async () => {
    const payload = '{"model":"llama3","prompt":"hi"}';
    const req = new Request("http://127.0.0.1/api/generate", {
      method: "POST",
      body: payload,
      headers: { "content-length": String(payload.length) },
    });
    const b = await prepareBody(req, 1024);
    expect(b.buffered).toBe(true);
    expect(await text(b.next())).toBe(payload);
    expect(b.replayable).toBe(true);
    expect(await text(b.next())).toBe(payload);
  });

  test("a body exactly at the limit is still buffered", async () => {
    const req = new Request("http://127.0.0.1/x", { method: "PUT", body: "12345", headers: { "content-length": "5" } });
    const b = await prepareBody(req, 5);
    expect(b.buffered).toBe(true);
  });

  test("a body declared larger than the limit is streamed, not read ahead", async () => {
    const { req, seen } = chunkedPost(["a".repeat(10), "b".repeat(10)]);
    req.headers.set("content-length", "20");
    const b = await prepareBody(req, 19);
    expect(b.buffered).toBe(false);
    expect(seen.pulls).toBe(0);
    expect(await text(b.next())).toBe("a".repeat(10) + "b".repeat(10));
  });

  test("a chunked body is streamed through whole", async () => {
    const { req } = chunkedPost(["one ", "two ", "three"]);
    const b = await prepareBody(req, 1 << 20);
    expect(b.buffered).toBe(false);
    expect(await text(b.next())).toBe("one two three");
  });

  test("a streamed body stays replayable until its stream is pulled, then it is not", async () => {
    const { req, seen } = chunkedPost(["x", "y"]);
    const b: ReplayableBody = await prepareBody(req, 1 << 20);
    const first = b.next() as ReadableStream<Uint8Array>;
    // A failed connect never reads the body: creating the stream alone must not pull.
    expect(b.replayable).toBe(true);
    expect(seen.pulls).toBe(0);
    const second = b.next() as ReadableStream<Uint8Array>;
    const reader = second.getReader();
    const r = await reader.read();
    expect(dec.decode(r.value)).toBe("x");
    expect(b.replayable).toBe(false);
    reader.releaseLock();
    expect(first).not.toBe(second);
  });

  test("cancelling the streamed body cancels the client's body", async () => {
    let cancelled: unknown;
    const body = new ReadableStream<Uint8Array>({
      pull(c) {
        c.enqueue(enc.encode("z"));
      },
      cancel(reason) {
        cancelled = reason;
      },
    });
    const req = new Request("http://127.0.0.1/prompt", { method: "POST", body, duplex: "half" } as RequestInit);
    const b = await prepareBody(req, 1 << 20);
    await (b.next() as ReadableStream<Uint8Array>).cancel("upstream gone");
    expect(cancelled).toBe("upstream gone");
  });
});
