/**
 * `gpu-turnstile lease -- <command>` and `gpu-turnstile release` against a running turnstile: the
 * GPU is leased for as long as the command runs, the command's exit code is mirrored, and a lease
 * that cannot be had leaves the command unrun.
 */
import { afterEach, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { normalizeArgv } from "../../src/cli/argv.ts";
import { leaseCommand, releaseCommand } from "../../src/cli/lease.ts";
import { statusCommand } from "../../src/cli/status.ts";
import type { LeaseEvent } from "../../src/status/steer.ts";
import { startStack, type Stack, until } from "../e2e/jobs/helpers.ts";

let stack: Stack | undefined;
afterEach(async () => {
  await stack?.stop();
  stack = undefined;
});

const env = { OLLAMA_URL: "http://127.0.0.1:1" };

/** A path a leased shell script touches once its traps are set (then a signal finds them). */
const dirs: string[] = [];
function readyFile(): string {
  const dir = mkdtempSync(join(tmpdir(), "lease-"));
  dirs.push(dir);
  return join(dir, "ready");
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

test("the command after -- is the leased program's, its own flags included", () => {
  expect(normalizeArgv(["lease", "--ttl", "5m", "--", "nvidia-smi", "--help", "status"])).toMatchObject({
    command: "lease",
    args: ["--ttl", "5m", "--", "nvidia-smi", "--help", "status"],
    help: false,
  });
  expect(() => normalizeArgv(["status", "--", "x"])).toThrow();
});

test("lease -- sh -c 'sleep 2; exit 3' holds the GPU for about 2 s, gives it back and exits 3", async () => {
  stack = await startStack();
  const { t } = stack;
  const events: (LeaseEvent & { at: number })[] = [];
  t.status.subscribe((e) => e.type === "lease" && events.push({ ...e.data, at: Date.now() }));
  let said = "";
  const code = await leaseCommand({ url: t.ollamaUrl, ttl: "1s", command: ["sh", "-c", "sleep 2; exit 3"], env, err: (s) => (said += s) });
  expect(code).toBe(3);
  expect(t.lock.state).toBe("idle");
  const grant = events.find((e) => e.event === "grant")!;
  const end = events.find((e) => e.event === "end")!;
  expect(grant.lease.holder).toBe("sh");
  // A 1 s TTL outlived by a 2 s command: the renewals kept it; the command's exit returned it.
  expect(end).toMatchObject({ reason: "returned" });
  expect(end.at - grant.at).toBeGreaterThanOrEqual(1900);
  expect(end.at - grant.at).toBeLessThan(4000);
  expect(events.filter((e) => e.event === "renew").length).toBeGreaterThanOrEqual(2);
  expect(said).toContain("GPU leased");
});

test("a lease that cannot be had says why and does not run the command", async () => {
  stack = await startStack({ env: { LEASE_MAX_TTL: "1m" } });
  let said = "";
  const code = await leaseCommand({ url: stack.t.ollamaUrl, ttl: "2h", command: ["sh", "-c", "exit 0"], env, err: (s) => (said += s) });
  expect(code).toBe(1);
  // In the Go durations the TTL was given in, not milliseconds.
  expect(said).toContain("ttl 2h0m0s is above LEASE_MAX_TTL (1m0s)");
  expect(said).toContain("the command was not run");
});

test("release revokes a lease held by another program", async () => {
  stack = await startStack();
  const { t } = stack;
  const res = await fetch(`${t.ollamaUrl}/turnstile/lease`, { method: "POST", body: '{"holder":"game"}' });
  const { id } = (await res.json()) as { id: string };
  let shown = "";
  expect(await statusCommand({ url: t.ollamaUrl, json: false, watch: false, env, out: (s) => (shown += s) })).toBe(0);
  expect(shown).toContain(`lease: game (${id})`);
  expect(shown).toContain("GPU: lease for");
  let out = "";
  expect(await releaseCommand({ url: t.ollamaUrl, out: (s) => (out += s) })).toBe(0);
  expect(out).toContain(`lease ${id} revoked`);
  expect(t.lock.state).toBe("idle");
});

test("Ctrl-C on gpu-turnstile lease goes to the command; the lease is given back and the exit says it was interrupted", async () => {
  stack = await startStack();
  const { t } = stack;
  const main = new URL("../../src/main.ts", import.meta.url).pathname;
  const proc = Bun.spawn([process.execPath, main, "lease", "--url", t.ollamaUrl, "--holder", "sleeper", "--", "sleep", "30"], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "ignore", "pipe"],
  });
  // Its stderr says when the command has started (the lease is held from before that).
  let said = "";
  const reading = (async () => {
    for await (const chunk of proc.stderr.pipeThrough(new TextDecoderStream())) said += chunk;
  })();
  await until(() => said.includes("GPU leased"), "the command started", 10_000);
  expect(t.lock.state).toBe("lease");
  proc.kill("SIGINT");
  expect(await proc.exited).toBe(130);
  expect(t.lock.state).toBe("idle");
  await reading;
}, 20_000);

/** `lease -- sh -c …` whose script sets `trap` for SIGTERM; resolves once the trap is set. */
async function leasedScript(t: Stack["t"], trap: string, extra: Partial<Parameters<typeof leaseCommand>[0]> = {}) {
  const out = { said: "" };
  const ready = readyFile();
  const script = `trap '${trap}' TERM; touch ${ready}; while :; do sleep 0.05; done`;
  const exit = leaseCommand({ url: t.ollamaUrl, command: ["sh", "-c", script], env, err: (s) => (out.said += s), ...extra });
  await until(() => existsSync(ready), "the command running under its lease");
  return { exit, out };
}

test("a revoked lease stops its command at once (not at the next renewal an hour away) and the exit says so", async () => {
  stack = await startStack();
  // The command stops cleanly on SIGTERM (exit 0): the lease's end still makes the exit non-zero.
  // Renewals are an hour apart (ttl 3h): only the event stream can tell it within the test's time.
  const { exit, out } = await leasedScript(stack.t, "exit 0", { ttl: "3h" });
  expect(await releaseCommand({ url: stack.t.ollamaUrl, out: () => {} })).toBe(0);
  expect(await exit).toBe(1);
  expect(out.said).toContain("the lease has ended (revoked by 127.0.0.1); stopping sh (SIGTERM, SIGKILL after 10s)");
}, 15_000);

test("a command that ignores SIGTERM is killed after the grace period", async () => {
  stack = await startStack();
  const { exit } = await leasedScript(stack.t, "", { killGraceMs: 300 });
  await releaseCommand({ url: stack.t.ollamaUrl, out: () => {} });
  expect(await exit).toBe(128 + 9);
});

test("a command that does not exist is found out before the card is emptied", async () => {
  stack = await startStack();
  const { t } = stack;
  let said = "";
  expect(await leaseCommand({ url: t.ollamaUrl, command: ["no-such-command-here"], env, err: (s) => (said += s) })).toBe(127);
  expect(said).toContain("no such command: no-such-command-here; the GPU was not leased");
  expect(stack.ollama!.calls.filter((c) => c.path === "/api/ps")).toEqual([]);
  expect(t.status.snapshot(false).history.map((h) => h.state)).toEqual(["idle"]);
});

test("a refused release or lease says the turnstile's reason once, not behind a second 'gpu-turnstile:'", async () => {
  stack = await startStack({ env: { ADMIN_TOKEN: "the-right-token-0123" } });
  const main = new URL("../../src/main.ts", import.meta.url).pathname;
  for (const args of [["release"], ["lease", "--", "true"]]) {
    const proc = Bun.spawn([process.execPath, main, args[0]!, "--url", stack.t.ollamaUrl, ...args.slice(1)], {
      env: { PATH: process.env.PATH ?? "", HOME: tmpdir(), OLLAMA_URL: "http://127.0.0.1:1", ADMIN_TOKEN: "a-wrong-token-0123456" },
      stdio: ["ignore", "ignore", "pipe"],
    });
    const err = await new Response(proc.stderr).text();
    expect(await proc.exited).toBe(1);
    expect(err).toContain("forbidden: wrong admin token");
    expect(err).not.toContain("gpu-turnstile: gpu-turnstile:");
    expect(err).not.toContain(": gpu-turnstile: ");
  }
});
