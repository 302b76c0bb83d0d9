/**
 * Scenario 6: a compiled binary from exec to its first /healthz answer. The probe connects
 * every millisecond from the moment of spawn; a run ends at the first 200. The process (and a
 * re-run child, if it made one) is then stopped by pid.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { now } from "../lib/clock.ts";
import { exchange } from "../lib/http1.ts";
import { descendants, freePort } from "../lib/proc.ts";
import { summarize, type Summary } from "../lib/stats.ts";

export interface Built {
  path: string;
  command: string;
  buildMs: number;
}

function run(cmd: string[], cwd: string): { ok: boolean; out: string } {
  const r = Bun.spawnSync(cmd, { cwd, stdout: "pipe", stderr: "pipe", env: process.env });
  return { ok: r.exitCode === 0, out: `${r.stdout.toString()}${r.stderr.toString()}` };
}

/** The project's own build when build.ts is there, else a plain `bun build --compile`. */
export function buildTurnstile(bun: string, root: string, outDir: string): Built {
  const t0 = performance.now();
  if (existsSync(join(root, "build.ts"))) {
    const cmd = [bun, "build.ts", "--target", "linux-x64"];
    const r = run(cmd, root);
    const path = join(root, "dist", "gpu-turnstile-linux-x64");
    if (!r.ok || !existsSync(path)) throw new Error(`bun build.ts failed:\n${r.out.slice(-2000)}`);
    return { path, command: "bun build.ts --target linux-x64", buildMs: performance.now() - t0 };
  }
  mkdirSync(outDir, { recursive: true });
  const path = join(outDir, "gpu-turnstile");
  const cmd = [bun, "build", "--compile", "--bytecode", "--minify", "src/main.ts", "--outfile", path];
  const r = run(cmd, root);
  if (!r.ok) throw new Error(`bun build --compile failed:\n${r.out.slice(-2000)}`);
  return { path, command: "bun build --compile --bytecode --minify src/main.ts", buildMs: performance.now() - t0 };
}

export function buildMinimal(bun: string, root: string, outDir: string): Built {
  const t0 = performance.now();
  mkdirSync(outDir, { recursive: true });
  const path = join(outDir, "minimal-server");
  const r = run([bun, "build", "--compile", "--bytecode", "--minify", "bench/minimal-server.ts", "--outfile", path], root);
  if (!r.ok) throw new Error(`building the minimal server failed:\n${r.out.slice(-2000)}`);
  return { path, command: "bun build --compile --bytecode --minify bench/minimal-server.ts", buildMs: performance.now() - t0 };
}

function probe(url: URL): Promise<number | undefined> {
  return new Promise((resolve) => {
    exchange(url, { method: "GET", path: "/healthz" }, {
      onHead(status, _h, t) {
        resolve(status === 200 ? t : undefined);
      },
      onError: () => resolve(undefined),
      onEnd: () => resolve(undefined),
    });
  });
}

async function stopTree(proc: ReturnType<typeof Bun.spawn>): Promise<void> {
  const kids = descendants(proc.pid);
  proc.kill("SIGTERM");
  const timer = setTimeout(() => {
    proc.kill("SIGKILL");
    for (const k of kids) {
      try {
        process.kill(k, "SIGKILL");
      } catch {
        // gone
      }
    }
  }, 3000);
  await proc.exited;
  clearTimeout(timer);
  for (const k of kids) {
    try {
      process.kill(k, 0);
      process.kill(k, "SIGKILL");
    } catch {
      // already exited with its parent
    }
  }
}

/**
 * CPU time (ms) the process's threads have spent running so far, from /proc/PID/task/*\/schedstat
 * (nanoseconds, unlike /proc's stat in 10 ms ticks): a start-up's own work, which waiting for a
 * busy machine's cores does not inflate the way it does the wall-clock time.
 */
function onCpuMs(pid: number): number | undefined {
  try {
    let ns = 0;
    for (const tid of readdirSync(`/proc/${pid}/task`)) ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[0]);
    return ns / 1e6;
  } catch {
    return undefined;
  }
}

/**
 * Median-friendly samples of spawn → first 200 from /healthz. `env` gets PORT / LISTEN_* filled in.
 * `cpuSamples`: the serving process's CPU time at that answer (see onCpuMs).
 */
export async function startupTimes(
  cmd: string[],
  env: (port: number) => Record<string, string>,
  runs: number,
): Promise<{ ms: Summary; samples: number[]; cpuSamples: number[]; failures: number }> {
  const samples: number[] = [];
  const cpuSamples: number[] = [];
  let failures = 0;
  for (let i = 0; i < runs; i++) {
    const port = freePort();
    const url = new URL(`http://127.0.0.1:${port}`);
    const t0 = now();
    const proc = Bun.spawn(cmd, { env: env(port), stdin: "ignore", stdout: "ignore", stderr: "ignore" });
    let answeredAt: number | undefined;
    const deadline = t0 + 10_000;
    while (answeredAt === undefined && now() < deadline && proc.exitCode === null) {
      answeredAt = await probe(url);
      if (answeredAt === undefined) await Bun.sleep(1);
    }
    const cpu = answeredAt === undefined ? undefined : onCpuMs(proc.pid);
    await stopTree(proc);
    if (answeredAt === undefined) failures++;
    else samples.push(answeredAt - t0);
    if (cpu !== undefined) cpuSamples.push(cpu);
  }
  return { ms: summarize(samples), samples, cpuSamples, failures };
}
