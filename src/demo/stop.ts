/**
 * The demo stays up for tries by hand until it is told to stop: Ctrl-C, a service manager's
 * SIGTERM, or the terminal closing (SIGHUP). Each must leave time to clean up (its temp file).
 */
const STOP_SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/** Resolves with the first stop signal. The handlers stay until then: a second Ctrl-C must not kill us mid-cleanup. */
export function untilStopped(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const handlers = STOP_SIGNALS.map((sig) => {
      const h = () => {
        resolve(sig);
        // Kept a moment longer, so a signal repeated during the cleanup is absorbed too.
        setTimeout(() => handlers.forEach((off) => off()), 1000).unref();
      };
      process.on(sig, h);
      return () => process.off(sig, h);
    });
  });
}
