/**
 * An in-memory machine for card-claim.ts: every FakeClaimSocket made from one FakeMachine sees
 * the others' claims, as processes on one machine see each other's sockets. `kill` drops a
 * process's claims the way the kernel does when it dies.
 */
import type { ClaimSocket, HeldAddress } from "./card-claim.ts";

export class FakeMachine {
  /** Address → the holder's process name and its answer. */
  readonly claims = new Map<string, { process: string; answer: () => string }>();

  /** The sockets of one process on this machine. */
  socket(process: string, opts: { silent?: boolean } = {}): ClaimSocket {
    return {
      listen: async (address, answer): Promise<HeldAddress | "taken"> => {
        if (this.claims.has(address)) return "taken";
        const entry = { process, answer: opts.silent ? () => "" : answer };
        this.claims.set(address, entry);
        return { release: () => void (this.claims.get(address) === entry && this.claims.delete(address)) };
      },
      ask: async (address) => {
        const said = this.claims.get(address)?.answer();
        return said ? said : undefined;
      },
    };
  }

  kill(process: string): void {
    for (const [address, c] of this.claims) if (c.process === process) this.claims.delete(address);
  }
}
