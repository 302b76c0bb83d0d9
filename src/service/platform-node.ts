/** The real Platform: node:fs for files, Bun.spawn for programs. */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { chmod, copyFile, mkdir, rename, rm, rmdir, stat, unlink, writeFile } from "node:fs/promises";
import { readTextBounded } from "../config/read-bounded.ts";
import type { FileInfo, Platform, RunResult } from "./platform.ts";

/**
 * The text files the installer reads (a unit file, a config file, the elevated run's log) are a
 * few KiB: a larger one is refused, named, instead of read whole.
 */
export const SERVICE_FILE_MAX_BYTES = 1 << 20;

export interface NodePlatformOptions {
  /** prefix for the canonical layout (tests); default "" */
  root?: string;
  env?: Readonly<Record<string, string | undefined>>;
}

export function nodePlatform(opts: NodePlatformOptions = {}): Platform {
  const os = process.platform === "win32" ? "win32" : "linux";
  const env = opts.env ?? process.env;
  return {
    os,
    root: opts.root ?? "",
    env,
    pid: process.pid,
    run: (cmd, args) => run(cmd, args, env),
    readText: async (path) => {
      try {
        return readTextBounded(path, SERVICE_FILE_MAX_BYTES);
      } catch (e) {
        if (isMissing(e)) return null;
        throw e;
      }
    },
    writeText: async (path, text, mode) => {
      const tmp = tempName(path);
      try {
        await writeFile(tmp, text, mode === undefined ? undefined : { mode });
        if (mode !== undefined) await chmod(tmp, mode); // writeFile's mode is masked by the umask
        await rename(tmp, path);
      } catch (e) {
        await rm(tmp, { force: true });
        throw e;
      }
    },
    copyFile: async (from, to, mode) => {
      const tmp = tempName(to);
      try {
        await copyFile(from, tmp);
        if (mode !== undefined) await chmod(tmp, mode);
        await rename(tmp, to);
      } catch (e) {
        await rm(tmp, { force: true });
        throw e;
      }
    },
    rename: (from, to) => rename(from, to),
    unlink: async (path) => {
      try {
        await unlink(path);
        return true;
      } catch (e) {
        if (isMissing(e)) return false;
        throw e;
      }
    },
    rmdirIfEmpty: async (path) => {
      try {
        await rmdir(path);
        return true;
      } catch {
        return false;
      }
    },
    mkdirp: async (path, mode) => {
      await mkdir(path, { recursive: true, mode });
    },
    stat: async (path): Promise<FileInfo | null> => {
      try {
        const s = await stat(path);
        return { isFile: s.isFile(), isDirectory: s.isDirectory(), size: s.size, mode: os === "win32" ? 0 : s.mode & 0o777 };
      } catch (e) {
        if (isMissing(e)) return null;
        throw e;
      }
    },
    hashFile: (path) => hashFile(path),
    isElevated: async () => {
      if (os === "win32") {
        const { isUserAnAdmin } = await import("./windows-native.ts");
        return isUserAnAdmin();
      }
      return typeof process.geteuid === "function" && process.geteuid() === 0;
    },
    sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
  };
}

async function run(cmd: string, args: readonly string[], env: Readonly<Record<string, string | undefined>>): Promise<RunResult> {
  let proc: ReturnType<typeof Bun.spawn>;
  try {
    proc = Bun.spawn([cmd, ...args], {
      stdin: "ignore",
      stdout: "pipe",
      stderr: "pipe",
      env: env as Record<string, string | undefined>,
      windowsHide: true,
    });
  } catch (e) {
    return { code: 127, stdout: "", stderr: `cannot run ${cmd}: ${(e as Error).message}` };
  }
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout as ReadableStream).text(),
    new Response(proc.stderr as ReadableStream).text(),
    proc.exited,
  ]);
  return { code, stdout, stderr };
}

function hashFile(path: string): Promise<string | null> {
  return new Promise((resolve, reject) => {
    const h = createHash("sha256");
    createReadStream(path)
      .on("data", (chunk) => h.update(chunk))
      .on("end", () => resolve(h.digest("hex")))
      .on("error", (e) => (isMissing(e) ? resolve(null) : reject(e)));
  });
}

function tempName(path: string): string {
  return `${path}.tmp-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
}

function isMissing(e: unknown): boolean {
  const code = (e as NodeJS.ErrnoException).code;
  return code === "ENOENT" || code === "ENOTDIR";
}
