/**
 * CLIENT_IDLE_TIMEOUT (issue 26) as Bun's own per-connection timer, so a few thousand idle or
 * slow sockets cannot use up the process's descriptors.
 *
 * Measured in Bun 1.4.4 with raw sockets: with `idleTimeout: N` a kept-alive connection is closed
 * ~N s (plus Bun's 4 s timer tick) after its last answer, whether it sends nothing or stops
 * half-way through its next request head (slowloris). `server.timeout(req, 0)` lifts the timer for
 * that request, so a request waiting for the GPU or a stream with long gaps is never cut; it stays
 * lifted on the connection after the answer, so `timeout(req, N)` must set it again before the
 * answer's last byte is written (after it, the call does nothing). Hence: lifted on arrival
 * (listener.ts), set again just before the end of each answer (app.ts `answered`, the body ends in
 * forward.ts and h1-pool.ts). Websockets have their own timer (ws-relay.ts leaves it off).
 * Bun closes these connections silently: there is no event to log.
 */

/** CLIENT_IDLE_TIMEOUT in Bun's terms: whole seconds, rounded up (the settings table caps it at Bun's 255); 0 = never. */
export function idleSeconds(ms: number): number {
  return Math.ceil(ms / 1000);
}
