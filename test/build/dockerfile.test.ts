/** The Dockerfile builds the way rootfs.test.ts proves: same script, scratch image, non-root, no self-update. */
import { expect, test } from "bun:test";
import * as fs from "node:fs";
import * as path from "node:path";

const repo = path.resolve(import.meta.dir, "../..");

interface Instruction {
  op: string;
  args: string;
}

/** Instructions per stage (comments dropped, `\\` continuations joined). */
function stages(text: string): Instruction[][] {
  const joined = text.replace(/\\\r?\n/g, " ");
  const out: Instruction[][] = [];
  for (const raw of joined.split(/\r?\n/)) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const m = /^(\w+)\s+(.*)$/.exec(line);
    if (!m?.[1] || m[2] === undefined) throw new Error(`unparsable Dockerfile line: ${line}`);
    const ins = { op: m[1].toUpperCase(), args: m[2].trim() };
    if (ins.op === "FROM") out.push([]);
    out.at(-1)?.push(ins);
  }
  return out;
}

const all = stages(fs.readFileSync(path.join(repo, "Dockerfile"), "utf8"));
const final = all.at(-1) ?? [];
const args = (op: string, st: Instruction[] = final) => st.filter((i) => i.op === op).map((i) => i.args);

test("the final image is FROM scratch with only the assembled root folder", () => {
  expect(final[0]).toEqual({ op: "FROM", args: "scratch" });
  expect(args("COPY")).toEqual(["--from=rootfs /rootfs /"]);
  expect(args("RUN")).toEqual([]);
});

test("runs as the non-root user rootfs.sh creates, exposes both listeners, never self-updates", () => {
  expect(args("USER")).toEqual(["65532:65532"]);
  expect(args("EXPOSE").join(" ").split(/\s+/).sort()).toEqual(["11434", "8188"]);
  expect(args("ENV")).toContain("AUTO_UPDATE=false");
  expect(args("ENTRYPOINT")).toEqual(['["/gpu-turnstile"]']);
  expect(fs.readFileSync(path.join(repo, "scripts/rootfs.sh"), "utf8")).toContain("turnstile:x:65532:65532:");
});

test("the root folder comes from scripts/rootfs.sh over the build.ts linux-x64 binary", () => {
  const rootfs = all.find((st) => /\bAS rootfs$/i.test(st[0]?.args ?? "")) ?? [];
  expect(args("RUN", rootfs)).toContain("sh scripts/rootfs.sh dist/gpu-turnstile-linux-x64 /rootfs");
  const build = all.find((st) => /\bAS build$/i.test(st[0]?.args ?? "")) ?? [];
  expect(args("RUN", build).some((r) => /bun build\.ts --target linux-x64$/.test(r) && r.includes('GPU_TURNSTILE_VERSION="$VERSION"'))).toBe(true);
  expect(args("ARG", build).some((a) => a.startsWith("VERSION"))).toBe(true);
});

test(".dockerignore keeps the host's node_modules and dist out of the build", () => {
  const ignored = fs.readFileSync(path.join(repo, ".dockerignore"), "utf8").split("\n");
  for (const p of ["node_modules", "dist", ".git"]) expect(ignored).toContain(p);
});
