/**
 * Swap a verified binary in next to the running one. A running executable cannot be overwritten
 * (Windows) or should not be (Linux: a half-written file would be what restarts), but it can be
 * renamed on both, so:
 *
 *   write <exe>.new (every byte, fsync)  →  read it back: size and SHA-256 of the verified download
 *   →  rename <exe> → <exe>.old  →  rename <exe>.new → <exe>
 *
 * write(2) may write fewer bytes than asked (a nearly full disk does exactly that before it says
 * ENOSPC), so the write loops; the read-back catches whatever the write calls did not report.
 * Any failure removes <exe>.new and leaves <exe> as it was (or puts it back). <exe>.old stays as
 * the way back until the new version is up and calls cleanupAfterStart().
 */
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { UpdateRefused } from "./types.ts";

/** Staging went wrong on this machine (disk, rights): the release itself was fine. */
export class StagingFailed extends UpdateRefused {}

export function stagingPaths(execPath: string): { next: string; old: string } {
  return { next: `${execPath}.new`, old: `${execPath}.old` };
}

/** The filesystem calls staging makes; tests swap one for a failing one. */
export interface StageFs {
  openSync(file: string, flags: "wx" | "r", mode?: number): number;
  /** Writes data[offset, offset+length) at the file position; returns how many bytes it wrote, possibly fewer. */
  writeSync(fd: number, data: Uint8Array, offset: number, length: number): number;
  /** Reads from the file position into `into`; 0 at the end. */
  readSync(fd: number, into: Uint8Array): number;
  fsyncSync(fd: number): void;
  closeSync(fd: number): void;
  renameSync(from: string, to: string): void;
  rmSync(file: string): void;
  existsSync(file: string): boolean;
  modeOf(file: string): number;
  syncDir(dir: string): void;
}

export const realStageFs: StageFs = {
  openSync: (file, flags, mode) => fs.openSync(file, flags, mode),
  writeSync: (fd, data, offset, length) => fs.writeSync(fd, data, offset, length),
  readSync: (fd, into) => fs.readSync(fd, into, 0, into.byteLength, null),
  fsyncSync: (fd) => fs.fsyncSync(fd),
  closeSync: (fd) => fs.closeSync(fd),
  renameSync: (from, to) => fs.renameSync(from, to),
  rmSync: (file) => fs.rmSync(file, { force: true }),
  existsSync: (file) => fs.existsSync(file),
  modeOf: (file) => fs.statSync(file).mode & 0o777,
  syncDir(dir) {
    // Makes the renames durable on Linux; Windows cannot open a directory for fsync.
    if (process.platform === "win32") return;
    const fd = fs.openSync(dir, "r");
    try {
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  },
};

/** The download verify.ts accepted: its bytes and their SHA-256 (lower-case hex). */
export interface Verified {
  bytes: Uint8Array;
  sha256: string;
}

export function stageBinary(execPath: string, verified: Verified, f: StageFs = realStageFs): void {
  const { next, old } = stagingPaths(execPath);
  const step = (what: string, run: () => void): void => {
    try {
      run();
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      throw new StagingFailed(`staging failed, the running binary is unchanged: ${what}: ${err instanceof Error ? err.message : String(err)}`, {
        needsElevation: code === "EACCES" || code === "EPERM",
        cause: err,
      });
    }
  };
  const removeNext = (): void => {
    try {
      f.rmSync(next);
    } catch {
      // the refusal already names the real failure; a leftover .new is removed by the next start
    }
  };

  const mode = f.existsSync(execPath) ? f.modeOf(execPath) | 0o700 : 0o755;
  step(`removing a stale ${path.basename(next)}`, () => f.rmSync(next));
  try {
    step(`writing ${path.basename(next)}`, () => writeFile(f, next, verified.bytes, mode));
    step(`checking ${path.basename(next)}`, () => checkFile(f, next, verified));
    // A previous generation's .old: our own running image is <exe> right now, so this is not it.
    step(`removing the previous ${path.basename(old)}`, () => f.rmSync(old));
    step(`moving the running binary aside to ${path.basename(old)}`, () => f.renameSync(execPath, old));
  } catch (err) {
    removeNext();
    throw err;
  }
  try {
    step(`moving ${path.basename(next)} into place`, () => f.renameSync(next, execPath));
  } catch (err) {
    try {
      f.renameSync(old, execPath);
    } catch (restoreErr) {
      throw new StagingFailed(
        `staging failed and the running binary could not be put back: ${execPath} is now ${old} (${String(restoreErr)})`,
        { cause: err },
      );
    }
    removeNext();
    throw err;
  }
  try {
    f.syncDir(path.dirname(execPath));
  } catch {
    // durability only: the renames are done
  }
}

/** Every byte written and on disk, or an error. */
function writeFile(f: StageFs, file: string, data: Uint8Array, mode: number): void {
  withFd(f, f.openSync(file, "wx", mode), (fd) => {
    for (let at = 0; at < data.byteLength; ) {
      const n = f.writeSync(fd, data, at, data.byteLength - at);
      if (!(n > 0)) throw new Error(`short write: ${at} of ${data.byteLength} bytes written, then none`);
      at += n;
    }
    f.fsyncSync(fd);
  });
}

/** The file as it will run: exactly the verified bytes, read back from the disk. */
function checkFile(f: StageFs, file: string, expected: Verified): void {
  const hash = createHash("sha256");
  let size = 0;
  withFd(f, f.openSync(file, "r"), (fd) => {
    const chunk = new Uint8Array(1 << 20);
    for (let n; (n = f.readSync(fd, chunk)) > 0; size += n) hash.update(chunk.subarray(0, n));
  });
  const want = expected.bytes.byteLength;
  if (size !== want) throw new Error(`read back ${size} bytes, the verified download has ${want}`);
  const actual = hash.digest("hex");
  if (actual !== expected.sha256) throw new Error(`its SHA-256 is ${actual}, the verified download's is ${expected.sha256}`);
}

/** Runs `use`, then closes `fd`; a close error counts only when `use` succeeded (it may lose data). */
function withFd(f: StageFs, fd: number, use: (fd: number) => void): void {
  try {
    use(fd);
  } catch (err) {
    try {
      f.closeSync(fd);
    } catch {
      // the first error is the one worth reporting
    }
    throw err;
  }
  f.closeSync(fd);
}

/**
 * Call once the new version is up (listeners bound): the rollback copy is no longer needed, and
 * a `.new` left by an interrupted staging is garbage. Best effort; returns what was removed.
 */
export function cleanupAfterStart(execPath: string): string[] {
  const removed: string[] = [];
  for (const file of Object.values(stagingPaths(execPath))) {
    try {
      if (!fs.existsSync(file)) continue;
      fs.rmSync(file, { force: true });
      removed.push(file);
    } catch {
      // Windows: a second instance may still run from it; the next start tries again
    }
  }
  return removed;
}
