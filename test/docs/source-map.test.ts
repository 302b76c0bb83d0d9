/**
 * SPEC.md's "Source map" stays true: every file or folder it names exists under src/, and every
 * module under src/ is named in its folder's entry, so a file added, moved or removed shows here.
 */
import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";

const root = new URL("../../", import.meta.url).pathname;
const src = join(root, "src");
const spec = readFileSync(join(root, "SPEC.md"), "utf8");
const block = /^## Source map\n+```\n([\s\S]*?)\n```/m.exec(spec)?.[1] ?? "";

/** Each name the map gives, with the folders it may stand in (the entry it is listed under). */
function namesInMap(): { name: string; dirs: string[] }[] {
  const out: { name: string; dirs: string[] }[] = [];
  let dirs = [""];
  for (const line of block.split("\n").slice(1)) {
    const indent = line.length - line.trimStart().length;
    const [head = "", ...rest] = line.trim().split(/\s{2,}/);
    const named = indent <= 4 ? head.split(/,\s*/) : [];
    const text = indent <= 4 ? rest.join(" ") : line;
    if (indent === 2) dirs = named.filter((n) => n.endsWith("/")).map((n) => n.slice(0, -1));
    if (indent === 2 && dirs.length === 0) dirs = [""];
    for (const n of named) out.push({ name: n.replace(/\/$/, ""), dirs: indent === 2 ? [""] : dirs });
    // Files named in a description: its own folder's ("argv.ts maps …"), not a path like deploy/x.cfg.
    for (const m of text.matchAll(/(?<![\w/.-])[\w-]+(?:\.d)?\.(?:ts|html)\b/g)) out.push({ name: m[0], dirs });
  }
  return out;
}

/** Every .ts and .html file under `dir`, relative to src/. */
function modules(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    if (e.isDirectory()) return modules(join(dir, e.name));
    return /\.(?:ts|html)$/.test(e.name) ? [relative(src, join(dir, e.name))] : [];
  });
}

describe("SPEC.md source map", () => {
  test("is found", () => {
    expect(block).toContain("turnstile.ts");
  });

  test("names only files and folders that exist", () => {
    const missing = namesInMap()
      .filter(({ name, dirs }) => !dirs.some((d) => existsSync(join(src, d, name))))
      .map(({ name, dirs }) => `${dirs.join("|") || "src"}: ${name}`);
    expect(missing).toEqual([]);
  });

  test("names every module under src/, in its own folder's entry", () => {
    const named = namesInMap();
    const unnamed = modules(src).filter((rel) => {
      const slash = rel.lastIndexOf("/");
      const [dir, name] = slash < 0 ? ["", rel] : [rel.slice(0, slash), rel.slice(slash + 1)];
      return !named.some((n) => n.name === name && n.dirs.includes(dir));
    });
    expect(unnamed).toEqual([]);
  });

  test("has an entry for every folder of src/ and every file at its top", () => {
    const named = new Set(namesInMap().filter((n) => n.dirs.includes("")).map((n) => n.name));
    const present = readdirSync(src, { withFileTypes: true }).map((e) => e.name);
    expect(present.filter((n) => !named.has(n))).toEqual([]);
  });
});
