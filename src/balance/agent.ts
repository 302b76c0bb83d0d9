/**
 * AGENT_LISTEN: HAProxy's agent-check port. Each connection gets one line — the lock's state as
 * HAProxy reads it (readiness.ts, agentLine) — and is closed; what the agent sends is ignored.
 * Binds exclusively like the HTTP listeners (Bun.listen sets no SO_REUSEPORT): a second instance
 * must not answer for this card.
 */
import type { Socket, TCPSocketListener } from "bun";

export interface AgentOptions {
  hostname: string | undefined;
  port: number;
  /** The line to send now, newline included. */
  line: () => string;
}

export function startAgent(opts: AgentOptions): TCPSocketListener<undefined> {
  return Bun.listen<undefined>({
    hostname: opts.hostname ?? "0.0.0.0",
    port: opts.port,
    socket: {
      open(socket: Socket<undefined>) {
        socket.end(opts.line());
      },
      data() {},
      error() {},
    },
  });
}
