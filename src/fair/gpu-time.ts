/**
 * GPU seconds per client over a sliding window (issue 30, QUOTA_GPU_SECONDS per QUOTA_GPU_WINDOW).
 * A span is the time one piece of a client's work held the card (an image job's run, an LLM
 * request from its grant to its end); running spans count up to now. Concurrent spans each count
 * their own wall time: several chats at once share the card, so their sum is an upper bound of the
 * client's real GPU time, the honest figure when the share of each is unknown.
 *
 * Use is kept in 120 slots per window (bounded memory however many spans a client has); the
 * window reaches back to the start of the slot holding `now - window`, so it is at least the
 * window and at most 1/120 longer (a client is never forgiven early).
 * Pure: the caller passes the time (ms, monotonic); nothing here reads a clock or sets a timer.
 */

const SLOTS = 120;

interface Span {
  /** Charged into the slots up to here; a running span's time since is added when use is read. */
  chargedUntil: number;
}

interface Use<T> {
  /** What the caller said of the client at its last span (its class, its quota). */
  tag: T;
  /** Slot index → ms of use in it. */
  readonly slots: Map<number, number>;
  readonly running: Set<Span>;
}

export interface GpuSpan {
  /** The work let go of the card at `now`; idempotent. */
  end(now: number): void;
}

export interface ClientUse<T> {
  readonly client: string;
  readonly tag: T;
  /** ms of GPU time in the window ending now, running work included. */
  readonly usedMs: number;
  /** Spans still running. */
  readonly running: number;
}

export class GpuTime<T = undefined> {
  readonly #slotMs: number;
  readonly #clients = new Map<string, Use<T>>();
  #sweptAt = -Infinity;

  constructor(readonly windowMs: number) {
    this.#slotMs = windowMs / SLOTS;
  }

  /** Work of `client` took the card at `from` (now, or a moment ago when its start was learned late); `tag` is kept with its use. */
  begin(client: string, from: number, tag: T): GpuSpan {
    let use = this.#clients.get(client);
    if (!use) this.#clients.set(client, (use = { tag, slots: new Map(), running: new Set() }));
    use.tag = tag;
    const span: Span = { chargedUntil: from };
    use.running.add(span);
    const u = use;
    return {
      end: (now) => {
        if (!u.running.delete(span)) return;
        this.#charge(u, span.chargedUntil, now);
      },
    };
  }

  /** ms `client` used in the window ending at `now`. */
  usedMs(client: string, now: number): number {
    this.#sweep(now);
    const use = this.#clients.get(client);
    return use ? this.#read(use, now) : 0;
  }

  /**
   * How long until `client`'s use falls below `limitMs` as its window slides on, if its running
   * work stopped now (0: it is below already). Work still running keeps adding, so a retry then
   * may be refused again, with a new figure.
   */
  retryAfterMs(client: string, limitMs: number, now: number): number {
    const use = this.#clients.get(client);
    if (!use) return 0;
    const used = this.#read(use, now);
    if (used < limitMs) return 0;
    let left = used;
    for (const i of [...use.slots.keys()].sort((a, b) => a - b)) {
      left -= use.slots.get(i)!;
      // Slot i leaves the window once `now - window` has passed its end.
      if (left < limitMs) return Math.max(0, (i + 1) * this.#slotMs + this.windowMs - now);
    }
    return this.windowMs;
  }

  /** Every client with use in the window ending at `now`, most first. */
  uses(now: number): ClientUse<T>[] {
    this.#sweep(now);
    const out: ClientUse<T>[] = [];
    for (const [client, use] of this.#clients) out.push({ client, tag: use.tag, usedMs: this.#read(use, now), running: use.running.size });
    return out.filter((u) => u.usedMs > 0 || u.running > 0).sort((a, b) => b.usedMs - a.usedMs || a.client.localeCompare(b.client));
  }

  /** Running spans charged up to `now`, slots out of the window dropped; the sum of the rest. */
  #read(use: Use<T>, now: number): number {
    for (const s of use.running) {
      if (now <= s.chargedUntil) continue;
      this.#charge(use, s.chargedUntil, now);
      s.chargedUntil = now;
    }
    const oldest = Math.floor((now - this.windowMs) / this.#slotMs);
    let sum = 0;
    for (const [i, ms] of use.slots) {
      if (i < oldest) use.slots.delete(i);
      else sum += ms;
    }
    return sum;
  }

  #charge(use: Use<T>, from: number, to: number): void {
    // Time longer ago than a window before its end can never be in a window again.
    let at = Math.max(from, to - this.windowMs);
    while (at < to) {
      const i = Math.floor(at / this.#slotMs);
      const edge = Math.min(to, (i + 1) * this.#slotMs);
      const next = edge > at ? edge : to;
      use.slots.set(i, (use.slots.get(i) ?? 0) + (next - at));
      at = next;
    }
  }

  /** Clients with nothing left in the window are forgotten, looked at once a slot (memory stays bounded by use). */
  #sweep(now: number): void {
    if (now - this.#sweptAt < this.#slotMs) return;
    this.#sweptAt = now;
    for (const [client, use] of this.#clients) if (this.#read(use, now) === 0 && use.running.size === 0) this.#clients.delete(client);
  }
}
