/**
 * Child processes of the benchmark and what is measured about them. Every child is registered
 * so an interrupted run leaves nothing behind; each is ended by its own pid, never by name.
 */
import { closeSync, openSync, readdirSync, readFileSync } from "node:fs";
import type { Subprocess } from "bun";

export interface Child {
  readonly name: string;
  readonly proc: Subprocess;
  readonly pid: number;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once the process has exited. */
  stop(graceMs?: number): Promise<void>;
}

const children = new Set<Child>();

export interface SpawnOptions {
  name: string;
  cmd: string[];
  env?: Record<string, string | undefined>;
  cwd?: string;
  /** stdout and stderr are appended here (for post-mortems); ignored when absent. */
  logFile?: string;
  ipc?: (message: unknown) => void;
}

export function spawnChild(opts: SpawnOptions): Child {
  const fd = opts.logFile ? openSync(opts.logFile, "a") : undefined;
  const proc = Bun.spawn(opts.cmd, {
    cwd: opts.cwd,
    env: opts.env as Record<string, string>,
    stdin: "ignore",
    stdout: fd ?? "ignore",
    stderr: fd ?? "ignore",
    ipc: opts.ipc ? (m) => opts.ipc!(m) : undefined,
    serialization: opts.ipc ? "json" : undefined,
  });
  if (fd !== undefined) closeSync(fd);
  const child: Child = {
    name: opts.name,
    proc,
    pid: proc.pid,
    async stop(graceMs = 2000) {
      children.delete(child);
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), graceMs);
      await proc.exited;
      clearTimeout(timer);
    },
  };
  children.add(child);
  return child;
}

/** Ends every child still running (at exit or on Ctrl-C). */
export async function stopAll(): Promise<void> {
  await Promise.all([...children].map((c) => c.stop(1000)));
}

export function killAllNow(): void {
  for (const c of children) {
    try {
      c.proc.kill("SIGKILL");
    } catch {
      // already gone
    }
  }
  children.clear();
}

/** A port that was free a moment ago on 127.0.0.1 (for programs that cannot report theirs). */
export function freePort(): number {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

export interface Memory {
  /** Resident set size now, KiB. */
  rssKiB: number;
  /** Peak resident set size over the process's life, KiB. */
  hwmKiB: number;
}

export function memoryOf(pid: number): Memory | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN);
    return { rssKiB: field("VmRSS"), hwmKiB: field("VmHWM") };
  } catch {
    return undefined;
  }
}

/** Sum over a process and all its descendants (nginx: master + workers). */
export function treeMemory(pid: number): Memory | undefined {
  const pids = [pid, ...descendants(pid)];
  const ms = pids.map(memoryOf).filter((m): m is Memory => m !== undefined);
  if (ms.length === 0) return undefined;
  return { rssKiB: ms.reduce((a, m) => a + m.rssKiB, 0), hwmKiB: ms.reduce((a, m) => a + m.hwmKiB, 0) };
}

function parentOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // comm may contain spaces and parentheses: the fields after it start after the last ")".
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(rest[1]);
  } catch {
    return undefined;
  }
}

export function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    if (parentOf(Number(name)) === pid) out.push(Number(name));
  }
  return out;
}

export function descendants(pid: number): number[] {
  const out: number[] = [];
  for (const c of childrenOf(pid)) out.push(c, ...descendants(c));
  return out;
}

/**
 * The process that actually serves: a program that re-runs itself (the turnstile lifting Bun's
 * fetch limit) leaves a launcher whose only child does the work.
 */
export function servingPid(pid: number): number {
  let cur = pid;
  for (;;) {
    const kids = childrenOf(cur);
    if (kids.length !== 1) return cur;
    cur = kids[0]!;
  }
}

/** Poll `url` until it answers 2xx or the deadline passes. */
export async function waitHttp(url: string, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  for (;;) {
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(1000) });
      await res.arrayBuffer();
      if (res.ok) return;
      last = `HTTP ${res.status}`;
    } catch (err) {
      last = err instanceof Error ? err.message : String(err);
    }
    if (Date.now() > deadline) throw new Error(`${what} did not answer at ${url} within ${timeoutMs} ms (${last})`);
    await Bun.sleep(20);
  }
}

function cpuTimes(): { busy: number; total: number } {
  const line = readFileSync("/proc/stat", "utf8").split("\n")[0]!;
  const v = line.trim().split(/\s+/).slice(1).map(Number);
  const idle = (v[3] ?? 0) + (v[4] ?? 0);
  const total = v.reduce((a, b) => a + b, 0);
  return { busy: total - idle, total };
}

/**
 * Share of all cores busy over `ms` (0..1): what else is running on the machine. On a shared
 * 2-core box another process's test run changes every figure, so the report states it.
 */
export async function cpuBusy(ms: number): Promise<number> {
  const a = cpuTimes();
  await Bun.sleep(ms);
  const b = cpuTimes();
  return b.total > a.total ? (b.busy - a.busy) / (b.total - a.total) : 0;
}

/** CPU time (ms) used so far by each thread of `pid`, summed by thread name. */
export function threadCpuMs(pid: number): Map<string, number> {
  const out = new Map<string, number>();
  const tick = 1000 / 100; // USER_HZ is 100 on Linux
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
      const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      const ms = (Number(rest[11]) + Number(rest[12])) * tick;
      out.set(name, (out.get(name) ?? 0) + ms);
    } catch {
      // thread ended
    }
  }
  return out;
}

/** CPU time (ms, user + system, all threads) used so far by a process and its descendants. */
export function treeCpuMs(pid: number): number {
  let total = 0;
  for (const p of [pid, ...descendants(pid)]) {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, "utf8");
      const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      total += (Number(rest[11]) + Number(rest[12])) * 10; // USER_HZ = 100
    } catch {
      // exited
    }
  }
  return total;
}
