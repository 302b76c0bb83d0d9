/**
 * Bun's fetch runs at most 256 requests at once per process unless BUN_CONFIG_MAX_HTTP_REQUESTS
 * says otherwise, and it reads that variable only at process start (setting process.env later has
 * no effect — measured). A proxy with 1,000 open streams would make the 257th client wait for a
 * stranger's chat to end. Only an https upstream is proxied through fetch (http ones go through
 * upstream/h1-pool.ts), so: the systemd unit and the container image set the variable; any other
 * start with an https upstream re-runs itself once with it set, passing stdio, signals and the
 * exit code through.
 */
import { selfCommand, userArgs } from "./compiled.ts";

export const FETCH_LIMIT_VAR = "BUN_CONFIG_MAX_HTTP_REQUESTS";
/** Bun's ceiling for this setting. */
export const FETCH_LIMIT = "65535";

export type ReexecDecision = { reexec: false; why: string } | { reexec: true };

/** Pure: should this process re-run itself with the fetch limit lifted? */
export function decideReexec(
  env: Readonly<Record<string, string | undefined>>,
  platform: string,
  args: readonly string[],
  upstreams: readonly string[],
): ReexecDecision {
  if (env[FETCH_LIMIT_VAR]) return { reexec: false, why: "already set" };
  if (!upstreams.some((u) => u.toLowerCase().startsWith("https:"))) return { reexec: false, why: "no https upstream (fetch carries no proxied request)" };
  // The Windows service control manager talks to the process it started; the installer sets the
  // variable in the service's environment instead.
  if (args.includes("--windows-service")) return { reexec: false, why: "Windows service (its registry environment sets it)" };
  // systemd accepts sd_notify only from its main PID by default; the unit sets the variable.
  if (env.NOTIFY_SOCKET) return { reexec: false, why: "under systemd (the unit sets it)" };
  if (platform !== "linux" && platform !== "win32" && platform !== "darwin") return { reexec: false, why: "unknown platform" };
  return { reexec: true };
}

/**
 * Re-run ourselves with the limit lifted and mirror the child's exit; returns only when no
 * re-run is needed. Called once the configuration is known (the upstreams decide), before
 * anything is logged or listened on.
 */
export async function ensureFetchLimit(upstreams: readonly string[]): Promise<void> {
  const d = decideReexec(process.env, process.platform, userArgs(), upstreams);
  if (!d.reexec) return;
  const child = Bun.spawn([...selfCommand(), ...userArgs()], {
    env: { ...process.env, [FETCH_LIMIT_VAR]: FETCH_LIMIT },
    stdio: ["inherit", "inherit", "inherit"],
  });
  // The child shares our terminal and gets Ctrl-C itself; a signal sent to us alone is passed on.
  for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
    process.on(sig, () => child.kill(sig));
  }
  const code = await child.exited;
  const sig = child.signalCode;
  process.exit(sig ? 128 + (typeof sig === "number" ? sig : (signalNumber(sig) ?? 1)) : code);
}

function signalNumber(sig: string): number | undefined {
  return ({ SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15 } as Record<string, number>)[sig];
}
