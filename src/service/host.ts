/**
 * What the running turnstile tells its service manager, the same five calls on every platform:
 * systemd (sd_notify), the Windows SCM, or nobody (a console run, Docker).
 */
import type { Notifier } from "./notify.ts";

export interface ServiceHost {
  readonly kind: "console" | "systemd" | "windows-service";
  /** set when a service integration was asked for but cannot work; log it once at startup */
  readonly problem?: string;
  /** every listener is bound and accepting: READY=1 / SERVICE_RUNNING */
  ready(): void;
  /** one line about the GPU state, shown by `systemctl status` (ignored elsewhere) */
  status(text: string): void;
  /** graceful shutdown has begun: STOPPING=1 / SERVICE_STOP_PENDING */
  stopping(): void;
  /**
   * The process is about to exit with this code; call it last. Windows reports SERVICE_STOPPED
   * (a non-zero code counts as a failure, so recovery restarts the service — the update's exit
   * code 3 relies on this); systemd needs nothing, it sees the exit itself.
   */
  stopped(exitCode: number): void;
  /**
   * The service manager asks us to stop (Windows STOP / SHUTDOWN controls). systemd sends
   * SIGTERM instead, which the application handles like Ctrl-C; this handler is never called there.
   */
  onStopRequest(handler: () => void): void;
}

export function consoleHost(problem?: string): ServiceHost {
  return {
    kind: "console",
    ...(problem ? { problem } : {}),
    ready() {},
    status() {},
    stopping() {},
    stopped() {},
    onStopRequest() {},
  };
}

export interface Timers {
  setInterval(fn: () => void, ms: number): unknown;
  clearInterval(handle: unknown): void;
}

const realTimers: Timers = {
  setInterval: (fn, ms) => {
    const t = setInterval(fn, ms);
    // The watchdog proves the event loop is alive; it must not be what keeps it alive.
    t.unref();
    return t;
  },
  clearInterval: (h) => clearInterval(h as ReturnType<typeof setInterval>),
};

/**
 * systemd: READY/STATUS/STOPPING through the notifier, and WATCHDOG=1 from a timer on the main
 * thread for as long as the process lives — so a blocked event loop misses its pings and systemd
 * restarts the service, which is what the watchdog is for.
 */
export function systemdHost(n: Notifier, timers: Timers = realTimers): ServiceHost {
  if (!n.enabled) return consoleHost(n.problem);
  let watchdog: unknown;
  if (n.watchdogIntervalMs !== undefined) watchdog = timers.setInterval(() => n.watchdog(), n.watchdogIntervalMs);
  let lastStatus = "";
  return {
    kind: "systemd",
    ready: () => void n.ready(),
    status: (text) => {
      // Lock transitions can be frequent; systemd only needs to hear about changes.
      if (text === lastStatus) return;
      lastStatus = text;
      n.status(text);
    },
    stopping: () => void n.stopping(),
    stopped: () => {
      if (watchdog !== undefined) timers.clearInterval(watchdog);
      watchdog = undefined;
      n.close();
    },
    onStopRequest() {},
  };
}
