import { describe, expect, test } from "bun:test";
import { captureHead, findPromptId } from "../../../src/jobs/capture.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

/** A source that hands out `chunks` one per pull and records how far it was read. */
function source(chunks: Uint8Array[], opts: { failAfter?: number; error?: unknown } = {}) {
  const state = { pulled: 0, finished: false };
  const stream = new ReadableStream<Uint8Array>(
    {
      pull(c) {
        if (opts.failAfter !== undefined && state.pulled === opts.failAfter) {
          c.error(opts.error);
          return;
        }
        const next = chunks[state.pulled];
        if (!next) {
          state.finished = true;
          c.close();
          return;
        }
        state.pulled++;
        c.enqueue(next);
      },
    },
    { highWaterMark: 0 },
  );
  return { stream, state };
}

/** A source the test drives by hand, to act after the client has gone. */
function manual() {
  let c!: ReadableStreamDefaultController<Uint8Array>;
  const stream = new ReadableStream<Uint8Array>({
    start(ctrl) {
      c = ctrl;
    },
  });
  return { stream, c };
}

async function readAll(s: ReadableStream<Uint8Array>): Promise<Uint8Array> {
  return new Uint8Array(await new Response(s).arrayBuffer());
}

const bytes = (n: number, seed: number) => Uint8Array.from({ length: n }, (_, i) => (i * 7 + seed) & 0xff);
const concat = (parts: Uint8Array[]) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
};

describe("captureHead", () => {
  test("the client gets every byte even when chunks are larger than the limit; head keeps only `limit`", async () => {
    const chunks = [bytes(100, 1), bytes(300, 2), bytes(50, 3)];
    const { stream } = source(chunks);
    const { body, head } = captureHead(stream, 64);
    const all = concat(chunks);
    expect(await readAll(body)).toEqual(all);
    expect(await head).toEqual(all.subarray(0, 64));
  });

  test("a limit spanning several chunks keeps exactly `limit` bytes in order", async () => {
    const chunks = [bytes(10, 1), bytes(10, 2), bytes(10, 3)];
    const { stream } = source(chunks);
    const { body, head } = captureHead(stream, 25);
    await readAll(body);
    expect(await head).toEqual(concat(chunks).subarray(0, 25));
  });

  test("a body shorter than the limit is kept whole", async () => {
    const { stream } = source([enc.encode('{"prompt_id":"p1"}')]);
    const { body, head } = captureHead(stream, 1 << 20);
    expect(dec.decode(await readAll(body))).toBe('{"prompt_id":"p1"}');
    expect(dec.decode(await head)).toBe('{"prompt_id":"p1"}');
  });

  test("a limit of 0 keeps nothing and still passes the body", async () => {
    const { stream } = source([bytes(5, 1)]);
    const { body, head } = captureHead(stream, 0);
    expect(await readAll(body)).toEqual(bytes(5, 1));
    expect((await head).length).toBe(0);
  });

  test("a client that cancels early does not stop the upstream read; head still resolves", async () => {
    const up = manual();
    const { body, head } = captureHead(up.stream, 200);
    const reader = body.getReader();
    up.c.enqueue(enc.encode('{"prompt_id":'));
    expect((await reader.read()).done).toBe(false);
    await reader.cancel("client gone");
    // ComfyUI keeps answering after the client left; we must keep reading to learn the id.
    up.c.enqueue(enc.encode('"abc"'));
    up.c.enqueue(enc.encode(',"number":3}'));
    up.c.enqueue(bytes(1000, 9));
    up.c.close();
    const h = await head;
    expect(findPromptId(h)).toBe("abc");
    expect(h.length).toBe(200);
  });

  test("a client that cancels before reading anything still lets head resolve", async () => {
    const { stream, state } = source([bytes(10, 1), bytes(10, 2)]);
    const { body, head } = captureHead(stream, 15);
    await body.cancel();
    expect(await head).toEqual(concat([bytes(10, 1), bytes(10, 2)]).subarray(0, 15));
    expect(state.finished).toBe(true);
  });

  test("an upstream error reaches the client and head resolves with what was read", async () => {
    const boom = new Error("upstream reset");
    const { stream } = source([enc.encode("abc"), enc.encode("def")], { failAfter: 2, error: boom });
    const { body, head } = captureHead(stream, 100);
    const reader = body.getReader();
    const got: string[] = [];
    let caught: unknown;
    try {
      for (;;) {
        const r = await reader.read();
        if (r.done) break;
        got.push(dec.decode(r.value));
      }
    } catch (err) {
      caught = err;
    }
    expect(caught).toBe(boom);
    expect(got.join("")).toBe("abcdef");
    expect(dec.decode(await head)).toBe("abcdef");
  });

  test("an upstream error after the client left still resolves head", async () => {
    const up = manual();
    const { body, head } = captureHead(up.stream, 100);
    up.c.enqueue(enc.encode("abc"));
    await body.cancel();
    up.c.enqueue(enc.encode("def"));
    up.c.error(new Error("reset"));
    expect(dec.decode(await head)).toBe("abcdef");
  });
});

describe("findPromptId", () => {
  const p = (s: string) => findPromptId(enc.encode(s));

  test("valid ComfyUI answer", () => {
    expect(p('{"prompt_id": "5f9a3c1e-1d2b-4c9a-9d1e-0b7c2f3a4e5d", "number": 7, "node_errors": {}}')).toBe(
      "5f9a3c1e-1d2b-4c9a-9d1e-0b7c2f3a4e5d",
    );
  });

  test("JSON cut at the capture limit still yields the id", () => {
    expect(p('{"prompt_id": "abc-123", "number": 7, "node_errors": {"12": {"errors": [{"ty')).toBe("abc-123");
  });

  test("a numeric id is turned into its string form", () => {
    expect(p('{"prompt_id": 42, "number": 1}')).toBe("42");
  });

  test.each([
    ["missing", '{"number": 1, "node_errors": {}}'],
    ["an error answer", '{"error": {"type": "prompt_no_outputs", "message": "x"}, "node_errors": {}}'],
    ["empty id", '{"prompt_id": ""}'],
    ["null id", '{"prompt_id": null}'],
    ["id cut in the middle", '{"prompt_id": "abc-12'],
    ["empty body", ""],
    ["not JSON", "<html>502 Bad Gateway</html>"],
    ["a JSON array", '["prompt_id"]'],
  ])("%s → none", (_name, s) => {
    expect(p(s)).toBeUndefined();
  });

  test("the id is found in a byte head cut in the middle of a multi-byte character", () => {
    const full = enc.encode('{"prompt_id": "id-1", "note": "日本語"}');
    expect(findPromptId(full.subarray(0, full.length - 5))).toBe("id-1");
  });
});
