/**
 * Swap a verified binary in next to the running one. A running executable cannot be overwritten
 * (Windows) or should not be (Linux: a half-written file would be what restarts), but it can be
 * renamed on both, so:
 *
 *   write <exe>.new (fsync)  →  rename <exe> → <exe>.old  →  rename <exe>.new → <exe>
 *
 * Any failure puts <exe> back and removes <exe>.new. <exe>.old stays as the way back until the
 * new version is up and calls cleanupAfterStart().
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { UpdateRefused } from "./types.ts";

export function stagingPaths(execPath: string): { next: string; old: string } {
  return { next: `${execPath}.new`, old: `${execPath}.old` };
}

/** The filesystem calls staging makes; tests swap one for a failing one. */
export interface StageFs {
  writeFileSync(file: string, data: Uint8Array, mode: number): void;
  renameSync(from: string, to: string): void;
  rmSync(file: string): void;
  existsSync(file: string): boolean;
  modeOf(file: string): number;
  syncDir(dir: string): void;
}

export const realStageFs: StageFs = {
  writeFileSync(file, data, mode) {
    const fd = fs.openSync(file, "wx", mode);
    try {
      fs.writeSync(fd, data);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  },
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

export function stageBinary(execPath: string, bytes: Uint8Array, f: StageFs = realStageFs): void {
  const { next, old } = stagingPaths(execPath);
  const step = (what: string, run: () => void): void => {
    try {
      run();
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      throw new UpdateRefused(`staging failed: ${what}: ${err instanceof Error ? err.message : String(err)}`, {
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
    step(`writing ${path.basename(next)}`, () => f.writeFileSync(next, bytes, mode));
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
      throw new UpdateRefused(
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
