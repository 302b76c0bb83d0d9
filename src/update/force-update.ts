/**
 * `--force-update`: the updater's check once, now, with a hard timeout and no retries. The
 * caller prints `message` (stdout for exit 0, stderr otherwise) and exits with `exitCode`.
 * AUTO_UPDATE=false does not stop it (it was asked for explicitly); APP_VER=dev and a build
 * without a key do.
 */
import { checkOnce } from "./check.ts";
import type { CheckContext } from "./check.ts";

export const FORCE_UPDATE_TIMEOUT_MS = 30_000;

export interface ForceUpdateOptions extends Omit<CheckContext, "signal"> {
  timeoutMs?: number;
  /** Restart the installed service if it is running (systemctl restart / SCM). */
  restartService: () => Promise<"restarted" | "not-running">;
  /** Windows: rerun this command elevated (UAC) and return its exit code; used only when staging lacked the rights. */
  elevate?: () => Promise<number>;
}

export interface ForceUpdateResult {
  exitCode: number;
  message: string;
}

export async function forceUpdate(o: ForceUpdateOptions): Promise<ForceUpdateResult> {
  const timeoutMs = o.timeoutMs ?? FORCE_UPDATE_TIMEOUT_MS;
  const outcome = await checkOnce({ ...o, signal: AbortSignal.timeout(timeoutMs) });
  switch (outcome.status) {
    case "disabled":
      return { exitCode: 1, message: `not updating: ${outcome.reason}` };
    case "current":
      return { exitCode: 0, message: outcome.reason };
    case "failed":
      if (outcome.needsElevation && o.elevate) {
        o.log.info("staging needs administrator rights; asking for elevation", { reason: outcome.reason });
        return { exitCode: await o.elevate(), message: "" };
      }
      return { exitCode: 1, message: `update failed: ${outcome.reason}` };
    case "staged":
      try {
        const restarted = await o.restartService();
        return restarted === "restarted"
          ? { exitCode: 0, message: `update ${outcome.tag} staged (${outcome.reason}); restarting service` }
          : { exitCode: 0, message: `update ${outcome.tag} staged (${outcome.reason}); applies on next start` };
      } catch (err) {
        const why = err instanceof Error ? err.message : String(err);
        return { exitCode: 1, message: `update ${outcome.tag} staged, but restarting the service failed: ${why}` };
      }
  }
}
