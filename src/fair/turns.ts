/**
 * Fair turns (issue 30): the order in which waiting work is taken, across clients and classes.
 * Pure: no I/O, no timers, no clock — the caller says when something joins, leaves or is taken.
 *
 * Weighted fair queueing by finish tags. Each client's jobs form one sequence: a job starts at the
 * later of the virtual time (the start tag of the job last taken) and its client's previous finish,
 * and finishes 1/weight later (its class's weight). The smallest finish is taken first, ties in
 * order of joining. Within a class (one weight) clients take turns: with 50 jobs of one client
 * waiting, another client's single job finishes one step after the current round, so it waits
 * behind at most one job of each other client of its class that has had no turn this round. A
 * better class (a higher weight) moves faster through the same virtual time: with weights 4 and
 * 1, an interactive client gets four turns for every turn of a batch client while both wait —
 * and a batch job's finish is fixed when it joins, so no stream of better work starves it: every
 * job joining later finishes after the current virtual time, which passes the batch job's finish
 * once the jobs before it are taken.
 *
 * The order of two waiters is fixed when the second joins: a waiter that leaves moves no one up
 * past anyone else, so a place told to a client changes only when someone joins ahead of it.
 */

export interface Waiter {
  /** Unique while waiting; ids that rise with joining make ties first come, first served. */
  readonly id: number;
  /** Who: a name, never a secret (see identity.ts). */
  readonly client: string;
  /** One of the classes given to the constructor; an unknown one gets the lowest weight. */
  readonly cls: string;
}

export interface TurnClass {
  readonly name: string;
  /** Turns relative to other classes while both wait (> 0). */
  readonly weight: number;
  /** Its image jobs join no image session while a chat waits (FAIR_CHATS_FIRST); the lock's rule. */
  readonly chatsFirst?: boolean;
}

/** A waiter's place: `position` 1 is next; `estimateMs` is the time until it is taken. */
export interface Place<T> {
  readonly entry: T;
  readonly position: number;
  readonly estimateMs: number;
}

interface Tagged<T> {
  readonly entry: T;
  readonly start: number;
  readonly finish: number;
}

export class FairTurns<T extends Waiter> {
  readonly #weights: ReadonlyMap<string, number>;
  readonly #lowest: number;
  /** In order of (finish, joining): the order they will be taken in if nobody joins. */
  #waiting: Tagged<T>[] = [];
  #vtime = 0;
  /** Per client: the finish of its last job, while that is ahead of the virtual time. */
  readonly #lastFinish = new Map<string, number>();

  constructor(classes: readonly TurnClass[]) {
    if (classes.length === 0) throw new Error("FairTurns: at least one class");
    for (const c of classes) if (!(c.weight > 0)) throw new Error(`FairTurns: class ${c.name} needs a weight above 0`);
    this.#weights = new Map(classes.map((c) => [c.name, c.weight]));
    this.#lowest = Math.min(...classes.map((c) => c.weight));
  }

  get size(): number {
    return this.#waiting.length;
  }

  /** The waiters, in the order they will be taken if nobody joins. */
  entries(): T[] {
    return this.#waiting.map((w) => w.entry);
  }

  add(entry: T): void {
    const start = Math.max(this.#vtime, this.#lastFinish.get(entry.client) ?? 0);
    const finish = start + 1 / (this.#weights.get(entry.cls) ?? this.#lowest);
    this.#lastFinish.set(entry.client, finish);
    // Ties keep joining order: the newcomer goes after every equal finish.
    let i = this.#waiting.length;
    while (i > 0 && this.#waiting[i - 1]!.finish > finish) i--;
    this.#waiting.splice(i, 0, { entry, start, finish });
  }

  /** Takes a waiter out of line without a turn (it gave up). False when it was not waiting. */
  remove(id: number): boolean {
    const i = this.#waiting.findIndex((w) => w.entry.id === id);
    if (i < 0) return false;
    const [gone] = this.#waiting.splice(i, 1);
    // The client's latest job gave up: its next starts where that one would have.
    if (this.#lastFinish.get(gone!.entry.client) === gone!.finish) this.#lastFinish.set(gone!.entry.client, gone!.start);
    return true;
  }

  /** Who would be taken next among those `eligible` allows, without taking it. */
  peek(eligible?: (e: T) => boolean): T | undefined {
    return this.#waiting.find((w) => !eligible || eligible(w.entry))?.entry;
  }

  /** Takes the next waiter among those `eligible` allows. */
  take(eligible?: (e: T) => boolean): T | undefined {
    const next = this.peek(eligible);
    if (next !== undefined) this.taken(next.id);
    return next;
  }

  /** A waiter got its turn (the caller chose it, e.g. after `peek`): the virtual time moves on. */
  taken(id: number): void {
    const i = this.#waiting.findIndex((w) => w.entry.id === id);
    if (i < 0) return;
    const [taken] = this.#waiting.splice(i, 1);
    this.#vtime = Math.max(this.#vtime, taken!.start);
    // Forget clients whose last finish the virtual time has reached: their next job starts from it.
    for (const [client, f] of this.#lastFinish) if (f <= this.#vtime) this.#lastFinish.delete(client);
  }

  /**
   * Everyone's place if nobody joins, each with the time until its turn: what is left of the work
   * running now, plus the cost of every waiter ahead of it. While nobody joins ahead of a waiter,
   * its position and estimate never rise: a turn or a leaver removes one waiter ahead or none, and
   * time only shortens what is left.
   */
  line(runningLeftMs: number, costMs: (e: T) => number): Place<T>[] {
    let at = Math.max(0, runningLeftMs);
    return this.#waiting.map((w, i) => {
      const place = { entry: w.entry, position: i + 1, estimateMs: at };
      at += costMs(w.entry);
      return place;
    });
  }
}
