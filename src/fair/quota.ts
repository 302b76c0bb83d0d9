/**
 * Quotas per client (issue 30): how many image jobs one client may have waiting or running at
 * once. Counted from arrival to the job's end; a job past the quota is refused on arrival (429),
 * never one already accepted. Pure: a map of counters.
 */

export interface QuotaSlot {
  /** Gives the place back; idempotent. */
  release(): void;
}

export class ClientQuota {
  readonly #held = new Map<string, number>();

  /** A slot for `client` when it holds fewer than `limit` (0 = no limit); undefined past it. */
  take(client: string, limit: number): QuotaSlot | undefined {
    const n = this.#held.get(client) ?? 0;
    if (limit > 0 && n >= limit) return undefined;
    this.#held.set(client, n + 1);
    let held = true;
    return {
      release: () => {
        if (!held) return;
        held = false;
        const left = (this.#held.get(client) ?? 1) - 1;
        if (left > 0) this.#held.set(client, left);
        else this.#held.delete(client);
      },
    };
  }

  held(client: string): number {
    return this.#held.get(client) ?? 0;
  }
}
