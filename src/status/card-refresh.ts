/**
 * When the card's holdings are read again for a watching page: Ollama's /api/ps and ComfyUI's
 * /system_stats, whose answers reach the page as `card` events. Without a reader they are read
 * only by the health probes (every HEALTH_INTERVAL); with one, at most once per tick (1 s), and
 * only when something can have changed them:
 * - who holds or waits changed, or a reader came;
 * - the card is not idle (a chat loads its model, an image job empties Ollama and fills ComfyUI);
 * - a resident model's keep-alive ended (Ollama unloads it then), for EXPIRY_WATCH_MS after.
 * An idle, unchanged card costs nothing more than the probes, however long a page stays open.
 * Pure scheduling: the reads and the clock are given.
 */

/** How long after a model's keep-alive ended its unload is watched for. */
export const EXPIRY_WATCH_MS = 30_000;

export interface CardRefreshOptions {
  /** Reads the upstreams; their answers go to the status model on their own (onPs, onStats). */
  read(): Promise<unknown>;
  /** The card is held by someone (not idle). */
  busy(): boolean;
  /** Epoch ms the first resident model's keep-alive ends, as last read; null when none does. */
  nextExpiry(): number | null;
  now?: () => number;
}

export class CardRefresh {
  readonly #o: CardRefreshOptions;
  readonly #now: () => number;
  #reading = false;

  constructor(opts: CardRefreshOptions) {
    this.#o = opts;
    this.#now = opts.now ?? Date.now;
  }

  /** One tick while a reader watches (status/events.ts); `changed` as the event hub says. */
  tick(changed: boolean): void {
    // A read still on its way (an upstream that hangs until PROBE_TIMEOUT) is never doubled.
    if (this.#reading || !this.#due(changed)) return;
    this.#reading = true;
    void this.#o
      .read()
      .catch(() => {}) // the health probes report an upstream that is down; the page keeps the last answer
      .finally(() => (this.#reading = false));
  }

  #due(changed: boolean): boolean {
    if (changed || this.#o.busy()) return true;
    const expiry = this.#o.nextExpiry();
    const since = expiry === null ? -1 : this.#now() - expiry;
    return since >= 0 && since <= EXPIRY_WATCH_MS;
  }
}
