/** Staging never leaves the machine without a runnable binary at the executable's path. */
import { afterEach, beforeEach, expect, test } from "bun:test";
import * as fs from "node:fs";
import { cleanupAfterStart, realStageFs, stageBinary } from "../../src/update/stage.ts";
import type { StageFs } from "../../src/update/stage.ts";
import { binary, fakeInstall } from "./helpers.ts";
import type { FakeInstall } from "./helpers.ts";

const NEW = binary("new");
let install: FakeInstall;
beforeEach(() => {
  install = fakeInstall();
});
afterEach(() => install.cleanup());

/** realStageFs, except the n-th rename (1-based) throws. */
function failingRename(n: number, code = "EIO"): StageFs {
  let calls = 0;
  return {
    ...realStageFs,
    renameSync(from, to) {
      if (++calls === n) throw Object.assign(new Error(`${code}: rename ${from}`), { code });
      realStageFs.renameSync(from, to);
    },
  };
}

test("swaps the new binary in, keeps the old one, preserves the exec bits", () => {
  fs.chmodSync(install.exe, 0o750);
  stageBinary(install.exe, NEW);
  expect(install.read("gpu-turnstile")).toEqual(NEW);
  expect(install.read("gpu-turnstile.old")).toEqual(install.original);
  expect(fs.statSync(install.exe).mode & 0o777).toBe(0o750);
  expect(fs.existsSync(`${install.exe}.new`)).toBe(false);
});

test("a failure moving the running binary aside removes the .new and changes nothing", () => {
  expect(() => stageBinary(install.exe, NEW, failingRename(1))).toThrow(/staging failed: moving the running binary aside/);
  expect(install.untouched()).toBe(true);
});

test("a failure moving the new one into place puts the running binary back", () => {
  expect(() => stageBinary(install.exe, NEW, failingRename(2))).toThrow(/staging failed: moving gpu-turnstile\.new into place/);
  expect(install.untouched()).toBe(true);
});

test("a failure writing the new file changes nothing", () => {
  const f: StageFs = {
    ...realStageFs,
    writeFileSync: () => {
      throw Object.assign(new Error("ENOSPC: no space left on device"), { code: "ENOSPC" });
    },
  };
  expect(() => stageBinary(install.exe, NEW, f)).toThrow(/writing gpu-turnstile\.new: ENOSPC/);
  expect(install.untouched()).toBe(true);
});

test("permission errors are marked so --force-update can elevate", () => {
  try {
    stageBinary(install.exe, NEW, failingRename(1, "EACCES"));
    throw new Error("should have thrown");
  } catch (err) {
    expect((err as { needsElevation?: boolean }).needsElevation).toBe(true);
  }
});

test("a stale .new and an older generation's .old do not block staging", () => {
  fs.writeFileSync(`${install.exe}.new`, "half-written");
  fs.writeFileSync(`${install.exe}.old`, "two versions ago");
  stageBinary(install.exe, NEW);
  expect(install.read("gpu-turnstile")).toEqual(NEW);
  expect(install.read("gpu-turnstile.old")).toEqual(install.original);
});

test("cleanupAfterStart removes the rollback copy and leftovers, and nothing else", () => {
  stageBinary(install.exe, NEW);
  fs.writeFileSync(`${install.exe}.new`, "leftover");
  expect(cleanupAfterStart(install.exe).sort()).toEqual([`${install.exe}.new`, `${install.exe}.old`]);
  expect(fs.readdirSync(install.dir)).toEqual(["gpu-turnstile"]);
  expect(cleanupAfterStart(install.exe)).toEqual([]);
});
