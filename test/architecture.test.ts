/**
 * Arrows point one way: a room under src/ imports only rooms below it (SPEC.md, "Source map").
 * A new import that points up — the way jobs/ once imported proxy/forward.ts while proxy/app.ts
 * imported jobs/ — fails here, naming the file and the import.
 */
import { expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";

const SRC = join(import.meta.dir, "..", "src");

/**
 * Lowest first. A room may import its own files and any room earlier in this list. A file directly
 * under src/ is a room of its own: version.ts is a leaf, turnstile.ts wires the rooms together.
 */
const ROOMS = [
  "version-define.d.ts",
  "sim",
  "config",
  "version.ts",
  "runtime",
  "fair",
  "lock",
  "upstream",
  "http",
  "ollama",
  "comfy",
  "jobs",
  "tenants",
  "balance",
  "proxy",
  "status",
  "observe",
  "update",
  "service",
  "turnstile.ts",
  "demo",
  "cli",
  "main.ts",
] as const;

function roomOf(file: string): string {
  const rel = relative(SRC, file);
  return rel.includes("/") ? rel.slice(0, rel.indexOf("/")) : rel;
}

function* sources(dir: string): Generator<string> {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) yield* sources(p);
    else if (e.name.endsWith(".ts")) yield p;
  }
}

const IMPORT = /(?:from|import)\s*\(?\s*["'](\.{1,2}\/[^"']+)["']/g;

test("every room under src/ has a place in the order", () => {
  const rooms = new Set([...sources(SRC)].map(roomOf));
  expect([...rooms].filter((r) => !(ROOMS as readonly string[]).includes(r))).toEqual([]);
});

test("no import points from a lower room to a higher one", () => {
  const rank = (room: string) => (ROOMS as readonly string[]).indexOf(room);
  const upward: string[] = [];
  for (const file of sources(SRC)) {
    const from = roomOf(file);
    for (const m of readFileSync(file, "utf8").matchAll(IMPORT)) {
      const to = roomOf(join(file, "..", m[1]!));
      if (to !== from && rank(to) > rank(from)) upward.push(`${relative(SRC, file)} (${from}) imports ${m[1]} (${to})`);
    }
  }
  expect(upward).toEqual([]);
});
