import { expect, test } from "bun:test";
import { inflateZstd, MAX_INFLATED_BYTES } from "../../src/http/zstd-body.ts";

test("a zstd body inflates to what was compressed", () => {
  const text = JSON.stringify({ model: "gpt-oss:120b-cloud", input: "hi" });
  const r = inflateZstd(Bun.zstdCompressSync(text));
  expect(r.ok && new TextDecoder().decode(r.body)).toBe(text);
});

test("a bomb stops at the limit with 413, without inflating the rest", () => {
  const bomb = Bun.zstdCompressSync(new Uint8Array(MAX_INFLATED_BYTES + 1));
  expect(bomb.length).toBeLessThan(10_000);
  const r = inflateZstd(bomb);
  expect(r).toEqual({ ok: false, status: 413, message: "the zstd request body inflates to more than 20 MiB" });
  expect(inflateZstd(Bun.zstdCompressSync(new Uint8Array(2000)), 1000)).toMatchObject({ ok: false, status: 413 });
});

test("anything that is not zstd: 400", () => {
  expect(inflateZstd(new TextEncoder().encode('{"model":"x"}'))).toMatchObject({ ok: false, status: 400 });
});
