/**
 * The listeners are bound first (a port in use must stop the start before anything is touched),
 * but what the start-up read finds (the upstreams' first probes, the card) decides the first
 * answer: every request is held at the door until `open` settles, so /healthz, /readyz,
 * /turnstile/status and the first LLM request already see a GPU picked up at start. A websocket relay touches no GPU state and is not held.
 */
import type { ListenerApp } from "./app.ts";

export function heldUntil(app: ListenerApp, open: Promise<unknown>): ListenerApp {
  let opened = false;
  const gate = open.then(
    () => void (opened = true),
    () => void (opened = true),
  );
  return {
    ...app,
    proxy: (req, ip) => (opened ? app.proxy(req, ip) : gate.then(() => app.proxy(req, ip))),
    internal: (req, ip) => (opened ? app.internal(req, ip) : gate.then(() => app.internal(req, ip))),
  };
}
