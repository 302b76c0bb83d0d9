/**
 * `gpu-turnstile demo --cards 2`: two simulated cards, each with its own Ollama, ComfyUI and
 * turnstile, behind a real HAProxy run from the shipped recipe (deploy/haproxy.cfg); the demo's
 * workload goes to HAProxy. The timeline shows which card did what: chats go to the card without
 * an image job, image jobs spread over the free cards, and each card's ledger stays clean.
 */
import { rmSync } from "node:fs";
import { useColor } from "../runtime/color.ts";
import type { SimPair } from "../sim/index.ts";
import type { Turnstile } from "../turnstile.ts";
import { VERSION } from "../version.ts";
import { findHaproxy, startHaproxy } from "./haproxy.ts";
import { gpuNarrator, printTryIt, startDemoSims, startDemoTurnstile, VRAM, waitUntilQuiet } from "./run.ts";
import { watchLines } from "./pointers.ts";
import { untilStopped } from "./stop.ts";
import { gib, secs, Timeline } from "./timeline.ts";
import { runWorkload } from "./workload.ts";

export interface CardsDemoOptions {
  cards: number;
  once: boolean;
  out?: (s: string) => void;
  color?: boolean;
  /** Where haproxy is (the tests' stand-in for a machine without it). */
  find?: typeof findHaproxy;
}

/** Exit code: 0 with no overlap on any card (or when skipped: no haproxy), 1 otherwise. */
export async function runCardsDemo(opts: CardsDemoOptions): Promise<number> {
  const out = opts.out ?? ((s: string) => void process.stdout.write(s));
  const tl = new Timeline(out, opts.color ?? useColor(process.stdout));
  if (opts.cards !== 2) {
    tl.text(`demo --cards takes 1 or 2 (the HAProxy recipe, deploy/haproxy.cfg, has two cards), not ${opts.cards}`, "warn");
    return 2;
  }
  const haproxy = (opts.find ?? findHaproxy)();
  if (!haproxy) {
    tl.text("demo --cards 2 skipped: it runs HAProxy in front of two cards, and haproxy is not installed (Debian/Ubuntu: apt install haproxy)", "warn");
    return 0;
  }

  const names = ["card1", "card2"];
  const cards: { name: string; sims: SimPair; t: Turnstile }[] = [];
  for (const name of names) {
    const sims = await startDemoSims();
    sims.gpu.on(gpuNarrator(tl, name));
    cards.push({ name, sims, t: startDemoTurnstile(sims, tl, name) });
  }
  const host = (u: string) => new URL(u).host;
  const lb = await startHaproxy(haproxy.path, cards.map((c) => ({ ollama: host(c.t.listener("ollama")!.url), comfy: host(c.t.listener("comfy")!.url) })));
  try {
    tl.text(`gpu-turnstile ${VERSION} demo — two simulated ${gib(VRAM)} cards, each with its own Ollama, ComfyUI and turnstile`, "gpu");
    tl.text(`clients talk to ${haproxy.version.split(" - ")[0]} running deploy/haproxy.cfg: Ollama side ${lb.ollama}, ComfyUI side ${lb.comfy}`);
    tl.text("watch each card while it runs:", "gpu");
    for (const c of cards) for (const l of watchLines(c.t.listener("ollama")!.url, undefined, c.name)) tl.text(l);
    tl.text("");
    // Two cards and HAProxy take a second or two to start: the script starts after them, not during.
    tl.restart();
    const result = await runWorkload({ ollama: lb.ollama, comfy: lb.comfy }, tl);
    for (const c of cards) {
      await c.t.tracker.settled();
      await waitUntilQuiet(c.sims);
    }

    tl.text("");
    tl.text("summary (two cards behind HAProxy)", "gpu");
    const gaveUp = result.chats.filter((c) => c.r.aborted).length;
    tl.text(`  chats answered:       ${result.chats.filter((c) => c.r.ok).length} of ${result.chats.length}${gaveUp ? `, ${gaveUp} client gave up while waiting` : ""}`);
    tl.text(`  images generated:     ${result.images.filter((i) => i.r.ok).length} of ${result.images.length}`);
    tl.text(`  makespan:             ${secs(result.makespanMs)}`);
    let overlaps = 0;
    for (const c of cards) {
      const chats = c.sims.ollama.calls.filter((x) => /^\/(api\/chat|v1\/chat\/completions)$/.test(x.path)).length;
      const images = c.sims.comfy.jobs().filter((j) => j.state === "done").length;
      const n = c.sims.gpu.overlaps().length;
      overlaps += n;
      tl.text(`  ${c.name}:                ${images} image(s), ${chats} chat(s), GPU overlaps: ${n}`, n ? "warn" : "ok");
    }
    tl.text(`  GPU overlaps: ${overlaps}`, overlaps ? "warn" : "ok");

    if (!opts.once) {
      const workflow = printTryIt(tl, { ollama: lb.ollama, comfy: lb.comfy }, false);
      for (const c of cards) tl.text(`  curl ${c.t.listener("ollama")!.url}/readyz?class=llm   # ${c.name}`);
      await untilStopped();
      rmSync(workflow, { force: true });
    }
    return overlaps === 0 ? 0 : 1;
  } finally {
    await lb.stop();
    for (const c of cards) {
      await c.t.stop(1000);
      await c.sims.stop();
    }
  }
}
