/**
 * The co-residency controller against fake clients (the simulators' end-to-end runs are in
 * test/e2e/jobs/coexist*.test.ts): what it keeps, what it serves, and two joiners at once.
 */
import { describe, expect, test } from "bun:test";
import type { ComfyClient } from "../../src/comfy/client.ts";
import { type CoexistEvent, Coexistence } from "../../src/jobs/coexist.ts";
import { LearnedPeaks } from "../../src/jobs/learned-peaks.ts";
import type { LoadedModel, OllamaClient } from "../../src/ollama/client.ts";

const GiB = 1024 ** 3;
const EMBED: LoadedModel = { name: "nomic-embed-text:latest", size: 600 * 1024 ** 2, sizeVram: 600 * 1024 ** 2 };

function setup(opts: { free?: number; statsDelay?: () => Promise<void>; listed?: () => LoadedModel[] } = {}) {
  const events: CoexistEvent[] = [];
  const unloaded: string[] = [];
  let free = opts.free ?? 20 * GiB;
  const ollama = {
    ps: async () => (unloaded.includes(EMBED.name) ? [] : (opts.listed?.() ?? [EMBED])),
    unload: async (m: string) => {
      unloaded.push(m);
      return "generate" as const;
    },
  } as unknown as OllamaClient;
  const comfy = {
    systemStats: async () => {
      await opts.statsDelay?.();
      return { version: "x", torchReserved: 0, shared: undefined, totalBytes: 24 * GiB, freeBytes: free };
    },
  } as unknown as ComfyClient;
  const peaks = new LearnedPeaks();
  peaks.record("small", 6 * GiB);
  const c = new Coexistence({
    options: { enabled: true, models: ["nomic-embed-text"], marginBytes: GiB, pollMs: 60_000, readTimeoutMs: 1000 },
    ollama,
    comfy,
    peaks,
    emit: (e) => events.push(e),
  });
  return { c, events, unloaded, peaks, setFree: (b: number) => (free = b) };
}

/** Polls (microtask turns, bounded) until `ok`: the fakes answer at once, nothing sleeps. */
async function until(ok: () => boolean): Promise<void> {
  for (let i = 0; i < 10_000 && !ok(); i++) await Promise.resolve();
  expect(ok()).toBe(true);
}

const unloadNone = async (keep?: string) => ({ tried: [], complete: true, keep });

describe("Coexistence", () => {
  test("keeps an admitted model and serves it by name, tag or none; other models wait", async () => {
    const { c, events } = setup();
    await c.prepare("small", unloadNone);
    expect(events.map((e) => e.kind)).toEqual(["admitted"]);
    expect(c.serve("nomic-embed-text")).toBeDefined();
    expect(c.serve("NOMIC-EMBED-TEXT:latest")).toBeDefined();
    expect(c.serve("nomic-embed-text:v1.5")).toBeUndefined();
    expect(c.serve("nomic*")).toBeUndefined();
    expect(c.serve(undefined)).toBeUndefined();
    expect(c.view()).toMatchObject({ model: EMBED.name, peakBytes: 6 * GiB });
    c.sessionEnded();
    expect(c.serve("nomic-embed-text")).toBeUndefined();
  });

  test("an unlearned workflow keeps nothing, and its completed run is learned at the session's end", async () => {
    const { c, events, peaks } = setup();
    await c.prepare("new", unloadNone);
    expect(events[0]).toMatchObject({ kind: "refused", reason: "unlearned" });
    expect(c.serve("nomic-embed-text")).toBeUndefined();
    c.jobEnded("new", "completed");
    // The watch's first reading of the card, then the end.
    await until(() => c.view().freeBytes !== undefined);
    c.sessionEnded();
    expect(peaks.get("new")?.peakBytes).toBeGreaterThan(0);
  });

  test("two jobs joining at once: one ejects, the other finds it gone (no throw, one unload)", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let holdStats = false;
    const { c, unloaded, events } = setup({ statsDelay: () => (holdStats ? gate : Promise.resolve()) });
    await c.prepare("small", unloadNone);
    holdStats = true;
    let emptied = 0;
    let empty!: () => void;
    const emptyGate = new Promise<void>((r) => (empty = r));
    const order: string[] = [];
    const a = c.beforeJob("unlearned-1", () => emptyGate.then(() => void emptied++)).then(() => order.push("a"));
    const b = c.beforeJob("unlearned-2", () => emptyGate.then(() => void emptied++)).then(() => order.push("b"));
    release();
    // Neither job goes out while Ollama is still being emptied.
    await until(() => unloaded.length === 1);
    expect(order).toEqual([]);
    empty();
    await Promise.all([a, b]);
    expect(order.sort()).toEqual(["a", "b"]);
    expect(unloaded).toEqual([EMBED.name]);
    expect(events.filter((e) => e.kind === "ejected")).toHaveLength(1);
    // The job that ejected waits for Ollama to be empty before it goes out.
    expect(emptied).toBe(1);
    c.sessionEnded();
  });

  test("a failed job after an admission makes its workflow exclusive only", async () => {
    const { c, peaks } = setup();
    await c.prepare("small", unloadNone);
    c.jobEnded("small", "failed");
    c.sessionEnded();
    expect(peaks.get("small")?.exclusiveOnly).toBeDefined();
  });

  test("a model Ollama reloaded partly on the CPU is ejected and reported; one that expired is no longer served", async () => {
    let listed: LoadedModel[] = [EMBED];
    const { c, events, unloaded } = setup({ listed: () => listed });
    await c.prepare("small", unloadNone);
    // The watch's first reading finds it as admitted: it stays.
    await until(() => c.view().freeBytes !== undefined);
    expect(c.serve(EMBED.name)).toBeDefined();
    c.sessionEnded();

    listed = [EMBED];
    await c.prepare("small", unloadNone);
    listed = [{ ...EMBED, sizeVram: EMBED.size / 2 }];
    await until(() => events.some((e) => e.kind === "ejected"));
    expect(events.find((e) => e.kind === "ejected")).toMatchObject({ model: EMBED.name, why: expect.stringContaining("reloaded") });
    expect(unloaded).toEqual([EMBED.name]);
    expect(c.serve(EMBED.name)).toBeUndefined();
    c.sessionEnded();

    unloaded.length = 0;
    listed = [EMBED];
    await c.prepare("small", unloadNone);
    listed = [];
    await until(() => c.view().model === undefined);
    expect(c.serve(EMBED.name)).toBeUndefined();
    expect(unloaded).toEqual([]);
    c.sessionEnded();
  });
});
