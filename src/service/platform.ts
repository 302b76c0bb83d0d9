/**
 * Everything service installation needs from the operating system, as one small interface.
 *
 * Install / converge / remove are plain functions over a Platform, so the same code runs against
 * the real machine (platform-node.ts), a temporary root with fake `systemctl` (integration test)
 * or an in-memory recorder (platform-fake.ts, unit tests of the Windows logic on Linux).
 *
 * Paths: callers pass *system* paths (`/etc/gpu-turnstile.env`, `C:\Program Files\…`). The
 * install code maps the canonical layout under `root` itself (see `under`), so a test can point
 * a whole install at a temporary directory while the unit file still says `/var/lib/...`.
 */

export interface RunResult {
  /** process exit code; 127 when the command could not be started at all */
  code: number;
  stdout: string;
  stderr: string;
}

export interface FileInfo {
  isFile: boolean;
  isDirectory: boolean;
  size: number;
  /** permission bits (0o777 mask); 0 on Windows where they mean little */
  mode: number;
}

export interface Platform {
  readonly os: "linux" | "win32";
  /** prefix for the canonical install layout; "" on a real machine */
  readonly root: string;
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly pid: number;

  /** runs a program without a shell and collects its output; never throws for a non-zero exit */
  run(cmd: string, args: readonly string[]): Promise<RunResult>;
  /** null when the file does not exist */
  readText(path: string): Promise<string | null>;
  /** writes atomically (temp file + rename) so a crash never leaves half a file */
  writeText(path: string, text: string, mode?: number): Promise<void>;
  /** copies atomically (temp file + rename): replacing a running Linux binary in place fails (ETXTBSY) */
  copyFile(from: string, to: string, mode?: number): Promise<void>;
  rename(from: string, to: string): Promise<void>;
  /** true when something was removed; a missing file is not an error */
  unlink(path: string): Promise<boolean>;
  /** removes an empty directory; false when it is missing or not empty */
  rmdirIfEmpty(path: string): Promise<boolean>;
  mkdirp(path: string, mode?: number): Promise<void>;
  stat(path: string): Promise<FileInfo | null>;
  /** hex SHA-256 of the content, or null when the file does not exist */
  hashFile(path: string): Promise<string | null>;
  /** root on Linux, an elevated (admin) token on Windows */
  isElevated(): Promise<boolean>;
  /** waits; the fake returns at once so polling loops in tests finish immediately */
  sleep(ms: number): Promise<void>;
}

/** Joins a root prefix and an absolute system path (`/etc/x` under `/tmp/r` → `/tmp/r/etc/x`). */
export function under(root: string, systemPath: string): string {
  if (root === "") return systemPath;
  const trimmed = root.endsWith("/") || root.endsWith("\\") ? root.slice(0, -1) : root;
  // A Windows drive path ("C:\Program Files") keeps its drive letter as a folder under the root.
  const rel = systemPath.replace(/^([A-Za-z]):/, "$1").replace(/\\/g, "/");
  return `${trimmed}${rel.startsWith("/") ? "" : "/"}${rel}`;
}
