/**
 * `gpu-turnstile demo --cards 2`: the demo's workload through HAProxy (deploy/haproxy.cfg) to two
 * simulated cards — the images spread over both, each card's ledger clean. Without haproxy it
 * says so in one line and exits 0.
 */
import { expect, test } from "bun:test";
import { runCardsDemo } from "../../src/demo/cards.ts";
import { findHaproxy } from "../../src/demo/haproxy.ts";

const MAIN = new URL("../../src/main.ts", import.meta.url).pathname;

async function demo(): Promise<{ code: number; out: string }> {
  const p = Bun.spawn([process.execPath, MAIN, "demo", "--cards", "2", "--once"], { stdout: "pipe", stderr: "pipe", env: { ...process.env, NO_COLOR: "1" } });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out: out + err };
}

test.skipIf(!findHaproxy())(
  "demo --cards 2: images on both cards, every chat a card could serve answered, 0 overlaps on each",
  async () => {
    const r = await demo();
    expect(r.code).toBe(0);
    expect(r.out).toContain("summary (two cards behind HAProxy)");
    expect(r.out).toMatch(/images generated:\s+5 of 5/);
    const perCard = [...r.out.matchAll(/ (card[12]): +(\d+) image\(s\), (\d+) chat\(s\), GPU overlaps: (\d+)/g)].map((m) => ({ card: m[1], images: Number(m[2]), overlaps: Number(m[4]) }));
    expect(perCard.map((c) => c.card)).toEqual(["card1", "card2"]);
    for (const c of perCard) {
      expect(c.images).toBeGreaterThan(0);
      expect(c.overlaps).toBe(0);
    }
    expect(r.out).toMatch(/GPU overlaps: 0\n/);
    // Each card's page and `status`, named by card.
    for (const card of ["card1", "card2"]) {
      expect(r.out).toMatch(new RegExp(`status page \\(${card}\\): +http://127\\.0\\.0\\.1:\\d+/turnstile/\n`));
      expect(r.out).toMatch(new RegExp(`in a terminal \\(${card}\\): .+ status --watch --url http://127\\.0\\.0\\.1:\\d+\n`));
    }
    // The workload plays as scripted once everything is up: its first chat starts at once, not
    // bunched with every arrival the start-up delayed.
    const first = /\+\s*([\d.]+)s\s+alice\s+asks/.exec(r.out);
    expect(Number(first?.[1])).toBeLessThan(0.5);
  },
  60_000,
);

test("demo --cards 2 without haproxy: one clear line, exit 0", async () => {
  let out = "";
  const code = await runCardsDemo({ cards: 2, once: true, out: (s) => void (out += s), color: false, find: () => undefined });
  expect(code).toBe(0);
  expect(out).toBe("demo --cards 2 skipped: it runs HAProxy in front of two cards, and haproxy is not installed (Debian/Ubuntu: apt install haproxy)\n");
});
