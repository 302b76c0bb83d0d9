import { expect, test } from "bun:test";
import { zstdDecompressSync } from "node:zlib";
import { MAX_INFLATED_BYTES, ZstdInflater, zstdFrames, type Inflated } from "../../src/http/zstd-body.ts";

const text = (r: Inflated) => (r.ok ? new TextDecoder().decode(r.body) : r);

/** A zstd frame that does not declare its size (as a streaming encoder writes it): the stream API leaves it out. */
async function undeclared(bytes: Uint8Array): Promise<Uint8Array> {
  const z = new CompressionStream("zstd" as CompressionFormat);
  return new Uint8Array(await new Response(new Blob([bytes as BlobPart]).stream().pipeThrough(z)).arrayBuffer());
}

test("a zstd body inflates to what was compressed; two frames inflate to both", async () => {
  const body = JSON.stringify({ model: "gpt-oss:120b-cloud", input: "hi" });
  const one = Bun.zstdCompressSync(body);
  expect(text(await new ZstdInflater().inflate(one))).toBe(body);
  expect(text(await new ZstdInflater().inflate(new Uint8Array([...one, ...one])))).toBe(body + body);
});

test("a bomb that declares its size is refused with 413 before anything is inflated", async () => {
  const bomb = Bun.zstdCompressSync(new Uint8Array(MAX_INFLATED_BYTES + 1));
  expect(bomb.length).toBeLessThan(10_000);
  expect(zstdFrames(bomb)).toEqual({ ok: true, declared: MAX_INFLATED_BYTES + 1 });
  const inflater = new ZstdInflater();
  expect(await inflater.inflate(bomb)).toEqual({ ok: false, status: 413, message: "the zstd request body inflates to more than 20 MiB" });
  expect(inflater.load).toEqual({ usedBytes: 0, waiting: 0 });
});

test("a bomb that does not declare its size stops at the limit with 413", async () => {
  const bomb = await undeclared(new Uint8Array(3 << 20));
  expect(zstdFrames(bomb)).toMatchObject({ ok: true, declared: undefined });
  const inflater = new ZstdInflater(4 << 20, 1 << 20);
  expect(await inflater.inflate(bomb)).toEqual({ ok: false, status: 413, message: "the zstd request body inflates to more than 1 MiB" });
  expect(inflater.load).toEqual({ usedBytes: 0, waiting: 0 });
});

test("a frame cut short, or followed by bytes that are no frame, is 400 (zlib alone inflates a truncated frame without a word)", async () => {
  const whole = Bun.zstdCompressSync(JSON.stringify({ input: "x".repeat(200_000), model: "gpt-oss:120b-cloud" }), { level: 19 });
  const truncated = whole.subarray(0, whole.length - 3);
  // What the old code trusted: a partial body, no error.
  expect(zstdDecompressSync(truncated).length).toBeGreaterThan(0);
  const inflater = new ZstdInflater();
  expect(await inflater.inflate(truncated)).toEqual({ ok: false, status: 400, message: "the zstd request body is cut short" });
  expect(await inflater.inflate(new Uint8Array([...whole, 1, 2, 3, 4, 5]))).toMatchObject({ ok: false, status: 400, message: "the zstd request body has bytes after its last frame" });
  expect(await inflater.inflate(new TextEncoder().encode('{"model":"x"}'))).toMatchObject({ ok: false, status: 400, message: "the zstd request body has no zstd frame" });
  // Well framed, wrong inside: the decoder's own error.
  const garbled = new Uint8Array(whole);
  garbled.fill(0xff, 20, 40);
  expect(await inflater.inflate(garbled)).toMatchObject({ ok: false, status: 400 });
  expect(inflater.load).toEqual({ usedBytes: 0, waiting: 0 });
});

test("bodies share one budget: past it they wait their turn in order, and a client gone while waiting leaves the queue", async () => {
  const full: number[] = [];
  const inflater = new ZstdInflater(2 << 20, 1 << 20, { full: (r) => full.push(r.waiting) });
  const mib = Bun.zstdCompressSync(new Uint8Array(1 << 20));
  const a = await inflater.inflate(mib);
  const b = await inflater.inflate(mib);
  expect(inflater.load).toEqual({ usedBytes: 2 << 20, waiting: 0 });
  const order: string[] = [];
  const gone = new AbortController();
  const c = inflater.inflate(mib).then((r) => (order.push("c"), r));
  const d = inflater.inflate(mib, gone.signal).catch((e: unknown) => (order.push("d gone"), e));
  const e = inflater.inflate(mib).then((r) => (order.push("e"), r));
  expect(inflater.load.waiting).toBe(3);
  expect(full).toEqual([1]);
  gone.abort(new Error("client left"));
  expect(((await d) as Error).message).toBe("client left");
  expect(inflater.load.waiting).toBe(2);
  if (a.ok) a.release();
  const rc = await c;
  expect(order).toEqual(["d gone", "c"]);
  if (b.ok) b.release();
  const re = await e;
  expect(order).toEqual(["d gone", "c", "e"]);
  if (rc.ok) rc.release();
  if (re.ok) re.release();
  expect(inflater.load).toEqual({ usedBytes: 0, waiting: 0 });
});
