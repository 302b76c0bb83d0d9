/**
 * An in-memory Platform that records what it is asked to do. Used by unit tests (the Windows
 * install logic runs on Linux this way) and by anyone who wants to see what an install would do.
 *
 * Files live in a Map; parents must exist (mkdirp first), so a forgotten mkdir fails here as it
 * would on a real disk. Commands are answered by a script function and recorded in `calls`;
 * every change to the file system is recorded in `changes` ("write /etc/x", "copy a -> b", ...),
 * which lets a test say "nothing was touched" in one assertion.
 */
import { createHash } from "node:crypto";
import type { FileInfo, Platform, RunResult } from "./platform.ts";

export interface Call {
  cmd: string;
  args: string[];
}

export type CommandScript = (cmd: string, args: readonly string[], fake: FakePlatform) => RunResult | undefined;

interface Entry {
  kind: "file" | "dir";
  data: string;
  mode: number;
}

export interface FakeOptions {
  os?: "linux" | "win32";
  root?: string;
  env?: Record<string, string | undefined>;
  pid?: number;
  elevated?: boolean;
  /** answers commands; returning undefined means "exit 0, no output" */
  script?: CommandScript;
}

const OK: RunResult = { code: 0, stdout: "", stderr: "" };

export class FakePlatform implements Platform {
  readonly os: "linux" | "win32";
  readonly root: string;
  readonly env: Record<string, string | undefined>;
  readonly pid: number;
  elevated: boolean;
  script: CommandScript;
  readonly calls: Call[] = [];
  readonly changes: string[] = [];
  /** total milliseconds asked of sleep(); polling loops never really wait */
  slept = 0;
  private readonly files = new Map<string, Entry>();

  constructor(opts: FakeOptions = {}) {
    this.os = opts.os ?? "linux";
    this.root = opts.root ?? "";
    this.env = opts.env ?? {};
    this.pid = opts.pid ?? 4242;
    this.elevated = opts.elevated ?? true;
    this.script = opts.script ?? (() => undefined);
    this.files.set(this.os === "win32" ? "C:" : "/", { kind: "dir", data: "", mode: 0o755 });
  }

  /** Test setup: creates a file (and its parents) without recording a change. */
  seed(path: string, text: string, mode = 0o644): this {
    this.mkdirsQuiet(parentOf(path));
    this.files.set(norm(path), { kind: "file", data: text, mode });
    return this;
  }

  /** Test setup: a directory (and its parents), not recorded. */
  seedDir(path: string): this {
    this.mkdirsQuiet(path);
    return this;
  }

  file(path: string): string | undefined {
    const e = this.files.get(norm(path));
    return e?.kind === "file" ? e.data : undefined;
  }

  modeOf(path: string): number | undefined {
    return this.files.get(norm(path))?.mode;
  }

  exists(path: string): boolean {
    return this.files.has(norm(path));
  }

  /** The recorded commands as "cmd arg arg" strings, handy in assertions. */
  commandLines(): string[] {
    return this.calls.map((c) => [c.cmd, ...c.args].join(" "));
  }

  async run(cmd: string, args: readonly string[]): Promise<RunResult> {
    this.calls.push({ cmd, args: [...args] });
    return this.script(cmd, args, this) ?? OK;
  }

  async readText(path: string): Promise<string | null> {
    const e = this.files.get(norm(path));
    if (!e) return null;
    if (e.kind === "dir") throw errno("EISDIR", path);
    return e.data;
  }

  async writeText(path: string, text: string, mode = 0o644): Promise<void> {
    this.needParent(path);
    this.files.set(norm(path), { kind: "file", data: text, mode });
    this.changes.push(`write ${path}`);
  }

  async copyFile(from: string, to: string, mode?: number): Promise<void> {
    const src = this.files.get(norm(from));
    if (!src || src.kind !== "file") throw errno("ENOENT", from);
    this.needParent(to);
    this.files.set(norm(to), { kind: "file", data: src.data, mode: mode ?? src.mode });
    this.changes.push(`copy ${from} -> ${to}`);
  }

  async rename(from: string, to: string): Promise<void> {
    const src = this.files.get(norm(from));
    if (!src) throw errno("ENOENT", from);
    this.needParent(to);
    this.files.delete(norm(from));
    this.files.set(norm(to), src);
    this.changes.push(`rename ${from} -> ${to}`);
  }

  async unlink(path: string): Promise<boolean> {
    const e = this.files.get(norm(path));
    if (!e || e.kind !== "file") return false;
    this.files.delete(norm(path));
    this.changes.push(`unlink ${path}`);
    return true;
  }

  async rmdirIfEmpty(path: string): Promise<boolean> {
    const key = norm(path);
    const e = this.files.get(key);
    if (!e || e.kind !== "dir") return false;
    for (const other of this.files.keys()) if (parentOf(other) === key) return false;
    this.files.delete(key);
    this.changes.push(`rmdir ${path}`);
    return true;
  }

  async mkdirp(path: string, mode = 0o755): Promise<void> {
    const created = this.mkdirsQuiet(path, mode);
    if (created) this.changes.push(`mkdir ${path}`);
  }

  async stat(path: string): Promise<FileInfo | null> {
    const e = this.files.get(norm(path));
    if (!e) return null;
    return { isFile: e.kind === "file", isDirectory: e.kind === "dir", size: e.data.length, mode: e.mode };
  }

  async hashFile(path: string): Promise<string | null> {
    const e = this.files.get(norm(path));
    if (!e || e.kind !== "file") return null;
    return createHash("sha256").update(e.data).digest("hex");
  }

  async isElevated(): Promise<boolean> {
    return this.elevated;
  }

  async sleep(ms: number): Promise<void> {
    this.slept += ms;
  }

  private needParent(path: string): void {
    const parent = this.files.get(parentOf(norm(path)));
    if (!parent || parent.kind !== "dir") throw errno("ENOENT", path);
  }

  /** true when at least one directory was created */
  private mkdirsQuiet(path: string, mode = 0o755): boolean {
    const key = norm(path);
    const existing = this.files.get(key);
    if (existing) {
      if (existing.kind !== "dir") throw errno("EEXIST", path);
      return false;
    }
    const parent = parentOf(key);
    if (parent !== key) this.mkdirsQuiet(parent, mode);
    this.files.set(key, { kind: "dir", data: "", mode });
    return true;
  }
}

/** Windows paths are case-insensitive and accept both slashes; Linux paths are kept as they are. */
function norm(path: string): string {
  if (/^[A-Za-z]:/.test(path)) {
    const p = path.replace(/\//g, "\\").replace(/\\+$/, "");
    return p.length === 2 ? p.toUpperCase() : p[0]!.toUpperCase() + p.slice(1).toLowerCase();
  }
  return path.length > 1 ? path.replace(/\/+$/, "") : path;
}

function parentOf(path: string): string {
  const p = norm(path);
  const i = Math.max(p.lastIndexOf("/"), p.lastIndexOf("\\"));
  if (i <= 0) return p.startsWith("/") ? "/" : p;
  if (/^[A-Za-z]:$/.test(p.slice(0, i))) return p.slice(0, i).toUpperCase();
  return p.slice(0, i);
}

function errno(code: string, path: string): NodeJS.ErrnoException {
  const e = new Error(`${code}: ${path}`) as NodeJS.ErrnoException;
  e.code = code;
  return e;
}
