/**
 * `gpu-turnstile lease [--ttl 2h] [--holder NAME] -- <command> [args…]`: borrow the whole GPU
 * from the running instance for one program. The lease is taken first (waiting like an image job
 * until the card is empty); only then does the command start. While it runs the lease is renewed
 * every third of its TTL, so a lease outlives this process by at most one TTL if it is killed
 * hard; on any exit of the command — Ctrl-C included — the lease is given back and the command's
 * exit code is ours. `gpu-turnstile release` sends a force-release.
 */
import { constants } from "node:os";
import { basename } from "node:path";
import { parseDuration } from "../config/duration.ts";
import { redactUrl } from "../config/redact.ts";
import { findCommand, KILL_GRACE_MS, stopCommand, watchLeaseEnd } from "./lease-watch.ts";
import { findInstance } from "./status.ts";

export interface LeaseCommandOptions {
  configPath?: string;
  url?: string;
  ttl?: string;
  holder?: string;
  /** The program and its arguments. */
  command: string[];
  env?: Record<string, string | undefined>;
  err?: (text: string) => void;
  /** Between SIGTERM and SIGKILL when the lease is revoked (default KILL_GRACE_MS). */
  killGraceMs?: number;
}

/** Passed on to the command rather than obeyed. */
const FORWARDED = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

export async function leaseCommand(opts: LeaseCommandOptions): Promise<number> {
  const say = opts.err ?? ((s: string) => void process.stderr.write(s));
  if (opts.command.length === 0) {
    say("gpu-turnstile: lease needs a command to run: gpu-turnstile lease [--ttl 2h] -- <command> [args…]\n");
    return 2;
  }
  // Checked before the card is emptied for it: a typo must not unload everyone's models.
  if (!findCommand(opts.command[0]!)) {
    say(`gpu-turnstile: no such command: ${opts.command[0]}; the GPU was not leased\n`);
    return 127;
  }
  const ttl = opts.ttl ?? "2h";
  let ttlMs: number;
  try {
    ttlMs = parseDuration(ttl);
  } catch (err) {
    say(`gpu-turnstile: --ttl: ${err instanceof Error ? err.message : String(err)}\n`);
    return 2;
  }
  // One handler for the whole run: before the command starts, Ctrl-C (or SIGTERM, SIGHUP) gives
  // up the wait (the turnstile drops the request); once it runs, the signal is the command's to
  // act on, and the lease is given back when it exits.
  const waiting = new AbortController();
  let child: ReturnType<typeof Bun.spawn> | undefined;
  const handlers = FORWARDED.map((sig) => {
    const handler = () => (child ? child.kill(sig) : waiting.abort());
    process.on(sig, handler);
    return () => process.off(sig, handler);
  });
  try {
    return await leaseAndRun(opts, say, ttl, ttlMs, waiting.signal, (c) => (child = c));
  } finally {
    for (const off of handlers) off();
  }
}

async function leaseAndRun(
  opts: LeaseCommandOptions,
  say: (text: string) => void,
  ttl: string,
  ttlMs: number,
  interrupted: AbortSignal,
  started: (child: ReturnType<typeof Bun.spawn>) => void,
): Promise<number> {
  const instance = findInstance(opts);
  if (!instance) return 1;
  const { base, headers } = instance;
  const holder = opts.holder ?? basename(opts.command[0]!);
  say(`gpu-turnstile: asking ${redactUrl(base)} for the GPU (holder ${JSON.stringify(holder)}, ttl ${ttl})…\n`);
  let leaseId: string;
  try {
    const res = await fetch(`${base}/turnstile/lease`, {
      method: "POST",
      headers: { ...headers, "content-type": "application/json" },
      body: JSON.stringify({ holder, ttl }),
      signal: interrupted,
    });
    const body = (await res.json().catch(() => ({}))) as { id?: string; error?: string };
    if (!res.ok || !body.id) {
      say(`gpu-turnstile: no lease, the command was not run: ${reason(body.error) ?? `${redactUrl(base)} answered ${res.status}`}\n`);
      return 1;
    }
    leaseId = body.id;
  } catch (err) {
    if (interrupted.aborted) {
      say("gpu-turnstile: gave up waiting for the GPU; the command was not run\n");
      return 130;
    }
    say(`gpu-turnstile: no turnstile answers at ${redactUrl(base)}: ${err instanceof Error ? err.message : String(err)}; the command was not run\n`);
    return 1;
  }
  const leaseUrl = `${base}/turnstile/lease/${leaseId}`;
  if (interrupted.aborted) {
    // Interrupted just as the lease came: it is given back, the command not run.
    await fetch(leaseUrl, { method: "DELETE", headers }).catch(() => {});
    say("gpu-turnstile: interrupted; the lease was given back and the command not run\n");
    return 130;
  }
  say(`gpu-turnstile: GPU leased (${leaseId}); running ${opts.command.join(" ")}\n`);

  let child: ReturnType<typeof Bun.spawn>;
  try {
    child = Bun.spawn(opts.command, { stdio: ["inherit", "inherit", "inherit"] });
    started(child);
  } catch (err) {
    say(`gpu-turnstile: could not start ${opts.command[0]}: ${err instanceof Error ? err.message : String(err)}\n`);
    await fetch(leaseUrl, { method: "DELETE", headers }).catch(() => {});
    return 127;
  }
  let lost = false;
  const ended = (why: string) => {
    if (lost) return;
    lost = true;
    const grace = opts.killGraceMs ?? KILL_GRACE_MS;
    say(`gpu-turnstile: the lease has ended (${why}); stopping ${opts.command[0]} (SIGTERM, SIGKILL after ${grace / 1000}s)\n`);
    stopCommand(child, grace);
  };
  const following = new AbortController();
  void watchLeaseEnd({ base, headers, id: leaseId, signal: following.signal, onEnd: (reason, by) => ended(`${reason}${by ? ` by ${by}` : ""}`) });
  const renewer = renewUntilLost(`${leaseUrl}/renew`, headers, ttlMs, say, ended);
  const code = await child.exited;
  following.abort();
  renewer.stop();
  if (!lost) await fetch(leaseUrl, { method: "DELETE", headers }).catch(() => {});
  // Killed by a signal: the shell's convention, 128 + its number.
  const sig = child.signalCode;
  const status = sig ? 128 + (constants.signals[sig as keyof typeof constants.signals] ?? 0) : code;
  // A command cut short by the lease's end did not do its work, whatever it exited with.
  return lost && status === 0 ? 1 : status;
}

/**
 * Renews every third of the TTL. A turnstile that does not answer (restarting: it takes the lease
 * again with the same id) is asked again every tenth of the TTL until one TTL has passed since the
 * last renewal; only then, or on a 404, is the lease lost.
 */
function renewUntilLost(url: string, headers: Record<string, string>, ttlMs: number, say: (text: string) => void, ended: (why: string) => void): { stop(): void } {
  let renewedAt = Date.now();
  let silent = false;
  let stopped = false;
  let timer: ReturnType<typeof setTimeout>;
  const renew = async () => {
    // Bounded: a turnstile that hangs must count as one that does not answer.
    const res = await fetch(url, { method: "POST", headers, signal: AbortSignal.timeout(Math.max(1000, ttlMs / 3)) }).catch(() => undefined);
    if (stopped) return;
    if (res?.ok) {
      renewedAt = Date.now();
      if (silent) say("gpu-turnstile: the turnstile answers again; the lease is renewed\n");
      silent = false;
    } else if (res?.status === 404) {
      return ended("force-released, or expired");
    } else if (Date.now() - renewedAt >= ttlMs) {
      return ended("the turnstile did not answer within its TTL");
    } else if (!silent) {
      silent = true;
      say(`gpu-turnstile: the turnstile does not answer (${res ? `status ${res.status}` : "down"}); renewing again until the lease's TTL\n`);
    }
    timer = setTimeout(renew, Math.max(50, silent ? ttlMs / 10 : ttlMs / 3));
  };
  timer = setTimeout(renew, Math.max(50, ttlMs / 3));
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

/** The turnstile's error without the "gpu-turnstile: " it starts with: the line has it already. */
function reason(error: string | undefined): string | undefined {
  return error?.replace(/^gpu-turnstile: /, "");
}

export async function releaseCommand(opts: { configPath?: string; url?: string; out?: (text: string) => void }): Promise<number> {
  const out = opts.out ?? ((s: string) => void process.stdout.write(s));
  const instance = findInstance(opts);
  if (!instance) return 1;
  const { base, headers } = instance;
  let res: Response;
  try {
    res = await fetch(`${base}/turnstile/release`, { method: "POST", headers });
  } catch (err) {
    process.stderr.write(`gpu-turnstile: no turnstile answers at ${redactUrl(base)}: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
  const body = (await res.json().catch(() => ({}))) as { error?: string; lease?: string | null; llm_cut?: number; jobs_interrupted?: string[] };
  if (!res.ok) {
    process.stderr.write(`gpu-turnstile: ${reason(body.error) ?? `${redactUrl(base)} answered ${res.status}`}\n`);
    return 1;
  }
  const jobs = body.jobs_interrupted ?? [];
  out(`released: ${body.lease ? `lease ${body.lease} revoked, ` : ""}${body.llm_cut ?? 0} LLM request(s) cut, ${jobs.length} image job(s) interrupted${jobs.length ? ` (${jobs.join(", ")})` : ""}\n`);
  return 0;
}
