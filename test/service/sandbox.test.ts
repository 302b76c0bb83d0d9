/**
 * Does Bun survive the unit's sandbox? Without systemd as PID 1 we apply the same kernel
 * restrictions ourselves (fixtures/sandbox-launch.c) and run a probe that does what the service
 * needs. This is the evidence for leaving MemoryDenyWriteExecute= out of the unit and for keeping
 * SystemCallFilter=@system-service in (the card claim's abstract socket included): if a Bun upgrade changes either answer, a test fails here.
 *
 * Needs gcc (and systemd-analyze for the syscall list); x86_64 Linux only. Skipped, with a note,
 * where those are missing.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const FIXTURES = join(import.meta.dir, "fixtures");
const UNISTD = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h";
const gcc = Bun.which("gcc") ?? Bun.which("cc");
const analyze = Bun.which("systemd-analyze");
const usable = process.platform === "linux" && process.arch === "x64" && gcc !== null;
if (!usable) console.warn("note: sandbox tests skipped (need x86_64 Linux and gcc)");

let dir: string;
let launcher: string;

beforeAll(() => {
  if (!usable) return;
  dir = mkdtempSync(join(tmpdir(), "gt-sandbox-"));
  launcher = join(dir, "sandbox-launch");
  const cc = Bun.spawnSync([gcc!, "-O1", "-o", launcher, join(FIXTURES, "sandbox-launch.c")], { stderr: "pipe" });
  if (cc.exitCode !== 0) throw new Error(`cannot build the launcher: ${cc.stderr.toString()}`);
});

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

interface Probe {
  exitCode: number | null;
  signal: string | number | null;
  result: { ffi?: string; fetch?: string; claim?: string; file?: string; rwxMappings?: number } | null;
  stderr: string;
}

async function probe(...mode: string[]): Promise<Probe> {
  const proc = Bun.spawn([launcher, ...mode, process.execPath, join(FIXTURES, "sandbox-probe.ts")], {
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, PROBE_DIR: dir },
  });
  const [out, err] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
  await proc.exited;
  const line = out.trim().split("\n").at(-1) ?? "";
  return {
    exitCode: proc.exitCode,
    signal: proc.signalCode,
    result: line.startsWith("{") ? JSON.parse(line) : null,
    stderr: err,
  };
}

describe.skipIf(!usable)("MemoryDenyWriteExecute", () => {
  test("control: without it, bun:ffi works and JIT memory is writable+executable", async () => {
    const p = await probe("none");
    expect(p.exitCode, p.stderr).toBe(0);
    expect(p.result).toMatchObject({ ffi: "ok", fetch: "pong", claim: "refused a second", file: "x" });
    expect(p.result!.rwxMappings).toBeGreaterThan(0);
  });

  // Both ways systemd implements the setting: the kernel flag (systemd >= 255 when available) and
  // the seccomp filter (systemd 252, Debian 12).
  test.each(["mdwe-prctl", "mdwe-seccomp"])("under %s, bun:ffi is refused, so sd_notify cannot work", async (mode) => {
    const p = await probe(mode);
    expect(p.exitCode, p.stderr).toBe(0); // Bun survives, without its JIT...
    expect(p.result!.rwxMappings).toBe(0);
    expect(p.result!.ffi).toBe("bun:ffi requires the JIT"); // ...and without bun:ffi
    expect(p.result!.fetch).toBe("pong");
  });
});

/** @system-service as systemd expands it, as x86_64 syscall numbers. */
function systemServiceSyscalls(): { allowed: number[]; maxKnown: number } {
  const out = Bun.spawnSync([analyze!, "syscall-filter"], { stdout: "pipe" }).stdout.toString();
  const groups = new Map<string, string[]>();
  let current: string[] | null = null;
  for (const raw of out.split("\n")) {
    const line = raw.trim();
    if (raw.startsWith("@")) groups.set(line, (current = []));
    else if (current && line !== "" && !line.startsWith("#")) current.push(line);
  }
  const expand = (group: string, seen = new Set<string>()): Set<string> => {
    const names = new Set<string>();
    if (seen.has(group)) return names;
    seen.add(group);
    for (const item of groups.get(group) ?? []) {
      if (item.startsWith("@")) for (const n of expand(item, seen)) names.add(n);
      else names.add(item);
    }
    return names;
  };
  const names = expand("@system-service");
  const numbers = new Map<string, number>();
  for (const m of readFileSync(UNISTD, "utf8").matchAll(/#define __NR_(\w+)\s+(\d+)/g)) numbers.set(m[1]!, Number(m[2]));
  const allowed = [...names].flatMap((n) => (numbers.has(n) ? [numbers.get(n)!] : []));
  return { allowed, maxKnown: Math.max(...numbers.values()) };
}

const canFilter = usable && analyze !== null && existsSync(UNISTD);
describe.skipIf(!canFilter)("SystemCallFilter=@system-service", () => {
  test("Bun serves, fetches, writes and uses bun:ffi without being killed", async () => {
    const { allowed, maxKnown } = systemServiceSyscalls();
    expect(allowed.length).toBeGreaterThan(200);
    const p = await probe("syscalls", String(maxKnown), allowed.join(" "));
    expect(p.signal, p.stderr).toBeNull();
    expect(p.exitCode, p.stderr).toBe(0);
    expect(p.result).toMatchObject({ ffi: "ok", fetch: "pong", claim: "refused a second", file: "x" });
  });

  test("the filter can fail: without socket() the probe is killed", async () => {
    const { allowed, maxKnown } = systemServiceSyscalls();
    const withoutSocket = allowed.filter((n) => n !== 41 /* __NR_socket */);
    const p = await probe("syscalls", String(maxKnown), withoutSocket.join(" "));
    expect(p.result).toBeNull();
    expect(p.signal).toBe("SIGSYS");
  });
});
if (usable && !canFilter) console.warn("note: SystemCallFilter test skipped (needs systemd-analyze and linux-libc-dev headers)");
