/** Test helpers for the simulators: fixtures, key-order-preserving shape comparison, polling. */
import { expect } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { isDict, parsePy, PyFloat, type PyValue } from "../../src/sim/pyjson.ts";

/** ../shared/api beside the work tree (CI lays shared/ next to its clone), or the absolute path. */
const FIXTURE_DIRS = [join(import.meta.dir, "../../../shared/api"), "/work/shared/api"];
const FIXTURES = FIXTURE_DIRS.find((d) => existsSync(join(d, "api-facts.md"))) ?? (FIXTURE_DIRS[0] as string);

export function fixtureText(name: string): string {
  return readFileSync(join(FIXTURES, name), "utf8");
}

/** A fixture parsed with key order and int/float kept (Python semantics). */
export function fixture(name: string): PyValue {
  return parsePy(fixtureText(name));
}

export function fixtureLines(name: string): PyValue[] {
  return fixtureText(name)
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => parsePy(l));
}

function kind(v: PyValue): string {
  if (v === null) return "null";
  if (typeof v === "boolean") return "bool";
  if (typeof v === "number" || typeof v === "bigint") return "int";
  if (v instanceof PyFloat) return "float";
  if (typeof v === "string") return "str";
  if (Array.isArray(v)) return "list";
  return "dict";
}

/**
 * Asserts `actual` has the fixture's structure: the same keys in the same order at every level
 * and the same JSON type for each value (int vs float too). Lists are compared element by element
 * over their common length, since their lengths are data, not shape.
 */
export function expectSameShape(actual: PyValue, expected: PyValue, path = "$"): void {
  const ka = kind(actual);
  const ke = kind(expected);
  if (ka !== ke) throw new Error(`${path}: expected ${ke}, got ${ka} (${JSON.stringify(String(actual))})`);
  if (isDict(actual) && isDict(expected)) {
    expect({ path, keys: [...actual.keys()] }).toEqual({ path, keys: [...expected.keys()] });
    for (const [k, v] of expected) expectSameShape(actual.get(k) as PyValue, v, `${path}.${k}`);
  } else if (Array.isArray(actual) && Array.isArray(expected)) {
    const n = Math.min(actual.length, expected.length);
    for (let i = 0; i < n; i++) expectSameShape(actual[i] as PyValue, expected[i] as PyValue, `${path}[${i}]`);
  }
}

/** Polls `fn` until it returns a truthy value; fails after `timeoutMs`. */
export async function waitFor<T>(fn: () => T | Promise<T>, what: string, timeoutMs = 5000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(3);
  }
}

export async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, { method: "POST", body: typeof body === "string" ? body : JSON.stringify(body), headers });
}

/** Reads a streamed body, returning each network chunk as text. */
export async function readChunks(res: Response, onChunk?: (text: string, index: number) => void | Promise<void>): Promise<string[]> {
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const dec = new TextDecoder();
  const out: string[] = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return out;
    const t = dec.decode(value, { stream: true });
    out.push(t);
    await onChunk?.(t, out.length - 1);
  }
}
