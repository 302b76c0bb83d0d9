/** Staging never leaves the machine without a runnable binary at the executable's path. */
import { afterAll, afterEach, beforeEach, describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { cleanupAfterStart, realStageFs, stageBinary } from "../../src/update/stage.ts";
import type { StageFs, Verified } from "../../src/update/stage.ts";
import { binary, fakeInstall, sha256Hex } from "./helpers.ts";
import type { FakeInstall } from "./helpers.ts";

const verified = (bytes: Uint8Array): Verified => ({ bytes, sha256: sha256Hex(bytes) });
const NEW = verified(binary("new"));
/** Big enough that a write of it can be cut short. */
const BIG = verified(new Uint8Array(randomBytes(300 * 1024)));
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
  expect(install.read("gpu-turnstile")).toEqual(NEW.bytes);
  expect(install.read("gpu-turnstile.old")).toEqual(install.original);
  expect(fs.statSync(install.exe).mode & 0o777).toBe(0o750);
  expect(fs.existsSync(`${install.exe}.new`)).toBe(false);
});

test("a failure moving the running binary aside removes the .new and changes nothing", () => {
  expect(() => stageBinary(install.exe, NEW, failingRename(1))).toThrow(/staging failed, the running binary is unchanged: moving the running binary aside/);
  expect(install.untouched()).toBe(true);
});

test("a failure moving the new one into place puts the running binary back", () => {
  expect(() => stageBinary(install.exe, NEW, failingRename(2))).toThrow(/staging failed, the running binary is unchanged: moving gpu-turnstile\.new into place/);
  expect(install.untouched()).toBe(true);
});

/** realStageFs with another writeSync; `real` writes for real. */
function withWrite(write: (real: StageFs["writeSync"], ...args: Parameters<StageFs["writeSync"]>) => number): StageFs {
  return { ...realStageFs, writeSync: (...args) => write(realStageFs.writeSync, ...args) };
}

const errno = (code: string): Error => Object.assign(new Error(`${code}: simulated`), { code });

describe("writing the staged file", () => {
  test("short writes are continued until every byte is on disk", () => {
    let calls = 0;
    const f = withWrite((real, fd, data, offset, length) => {
      calls++;
      return real(fd, data, offset, Math.min(length, 4096));
    });
    stageBinary(install.exe, BIG, f);
    expect(calls).toBe(Math.ceil(BIG.bytes.byteLength / 4096));
    expect(install.read("gpu-turnstile")).toEqual(BIG.bytes);
  });

  test("a disk that fills up (part written, then ENOSPC) changes nothing", () => {
    let written = 0;
    const f = withWrite((real, fd, data, offset, length) => {
      if (written > 0) throw errno("ENOSPC");
      return (written = real(fd, data, offset, Math.min(length, 1000)));
    });
    expect(() => stageBinary(install.exe, BIG, f)).toThrow(
      /^staging failed, the running binary is unchanged: writing gpu-turnstile\.new: ENOSPC: simulated$/,
    );
    expect(install.untouched()).toBe(true);
  });

  test("a write that makes no progress changes nothing", () => {
    const f = withWrite((real, fd, data, offset, length) => (offset === 0 ? real(fd, data, offset, 1000) : 0));
    expect(() => stageBinary(install.exe, BIG, f)).toThrow(/writing gpu-turnstile\.new: short write: 1000 of 307200 bytes written, then none/);
    expect(install.untouched()).toBe(true);
  });

  test("EIO on fsync changes nothing", () => {
    const f: StageFs = {
      ...realStageFs,
      fsyncSync: () => {
        throw errno("EIO");
      },
    };
    expect(() => stageBinary(install.exe, NEW, f)).toThrow(/writing gpu-turnstile\.new: EIO/);
    expect(install.untouched()).toBe(true);
  });

  test("read back: bytes lost by a write that claimed success change nothing", () => {
    const f = withWrite((real, fd, data, offset, length) => (real(fd, data, offset, Math.min(length, 1000)), length));
    expect(() => stageBinary(install.exe, BIG, f)).toThrow(/checking gpu-turnstile\.new: read back 1000 bytes, the verified download has 307200/);
    expect(install.untouched()).toBe(true);
  });

  test("read back: a corrupted byte changes nothing", () => {
    const f = withWrite((real, fd, data, offset, length) => {
      const copy = data.slice(offset, offset + length);
      copy[100] = (copy[100] ?? 0) ^ 1;
      return real(fd, copy, 0, copy.byteLength);
    });
    expect(() => stageBinary(install.exe, BIG, f)).toThrow(
      new RegExp(`checking gpu-turnstile\\.new: its SHA-256 is [0-9a-f]{64}, the verified download's is ${BIG.sha256}`),
    );
    expect(install.untouched()).toBe(true);
  });
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
  expect(install.read("gpu-turnstile")).toEqual(NEW.bytes);
  expect(install.read("gpu-turnstile.old")).toEqual(install.original);
});

test("cleanupAfterStart removes the rollback copy and leftovers, and nothing else", () => {
  stageBinary(install.exe, NEW);
  fs.writeFileSync(`${install.exe}.new`, "leftover");
  expect(cleanupAfterStart(install.exe).sort()).toEqual([`${install.exe}.new`, `${install.exe}.old`]);
  expect(fs.readdirSync(install.dir)).toEqual(["gpu-turnstile"]);
  expect(cleanupAfterStart(install.exe)).toEqual([]);
});

/**
 * A real nearly full filesystem: a 1 MiB tmpfs. write(2) there writes what fits and returns the
 * short count; only the next call says ENOSPC. Needs root to mount (CI runs as root).
 */
describe("on a real 1 MiB tmpfs", () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gt-tmpfs-"));
  const mount = process.getuid?.() === 0 ? spawnSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", dir], { encoding: "utf8" }) : undefined;
  const mounted = mount?.status === 0;
  if (!mounted) {
    console.warn(`stage.test.ts: tmpfs tests skipped — ${mount ? `mount failed: ${(mount.stderr || mount.error?.message || "").trim()}` : "needs root"}`);
  }
  afterAll(() => {
    if (mounted) spawnSync("umount", [dir]);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test.skipIf(!mounted)("a binary that does not fit: ENOSPC, the running one untouched, and it applies once there is room", () => {
    const exe = path.join(dir, "gpu-turnstile");
    const running = new Uint8Array(randomBytes(200 * 1024));
    fs.writeFileSync(exe, running, { mode: 0o755 });
    fs.writeFileSync(path.join(dir, "filler"), new Uint8Array(400 * 1024));
    const next = verified(new Uint8Array(randomBytes(600 * 1024)));
    expect(() => stageBinary(exe, next)).toThrow(/writing gpu-turnstile\.new: .*ENOSPC|no space left/i);
    expect(new Uint8Array(fs.readFileSync(exe))).toEqual(running);
    expect(fs.readdirSync(dir).sort()).toEqual(["filler", "gpu-turnstile"]);

    fs.rmSync(path.join(dir, "filler"));
    stageBinary(exe, next);
    expect(fs.readFileSync(exe).equals(next.bytes)).toBe(true);
    expect(new Uint8Array(fs.readFileSync(`${exe}.old`))).toEqual(running);
  });
});
