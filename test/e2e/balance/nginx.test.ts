/**
 * deploy/nginx.conf, run as shipped (addresses and ports rewritten) by a real nginx in front of two
 * turnstiles on their own simulated cards: nginx has no active checks, so the recipe is passive —
 * a busy card refuses a chat at once (X-Turnstile-Wait: 0) and nginx tries the next; when every
 * card refused, the chat waits at one. ComfyUI clients stay on one card by their whole address
 * (hash $remote_addr consistent), and the clients of one /24 spread over the cards. With
 * TRUSTED_PROXIES naming nginx, two clients that reach one card are two clients there (fair turns).
 * Skips with a note when nginx is missing.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callsTo, newPromptId, promptBody, startStack, submit, until, type Stack } from "../jobs/helpers.ts";
import { freePort } from "../../support/dead-port.ts";
import { fromAddress as from_, twoClientsOnOneCard } from "./from-address.ts";

const NGINX = Bun.which("nginx") ?? ["/usr/sbin/nginx", "/usr/local/sbin/nginx"].find((p) => existsSync(p));
if (!NGINX) console.warn("nginx is not installed (Debian package nginx): the nginx recipe test is skipped");

let cards: Stack[] = [];
let nginx: { ollama: string; comfy: string; stop(): Promise<void> } | undefined;

beforeAll(async () => {
  if (!NGINX) return;
  // nginx sends its upstream's name as Host; a turnstile on the LAN (the default :11434) answers any Host.
  // nginx connects from 127.0.0.1: the README's TRUSTED_PROXIES for nginx on the cards' machine.
  const env = { ALLOWED_HOSTS: "*", TRUSTED_PROXIES: "127.0.0.1" };
  cards = [await startStack({ env }), await startStack({ env })];
  const host = (u: string) => new URL(u).host;
  const [ollama, comfy] = [freePort(), freePort()];
  let cfg = readFileSync(new URL("../../../deploy/nginx.conf", import.meta.url), "utf8");
  for (const [i, c] of cards.entries()) {
    cfg = cfg.replaceAll(`192.168.1.1${i + 1}:11434`, host(c.t.ollamaUrl)).replaceAll(`192.168.1.1${i + 1}:8188`, host(c.t.comfyUrl));
  }
  cfg = cfg.replace("listen 11434;", `listen 127.0.0.1:${ollama};`).replace("listen 8188;", `listen 127.0.0.1:${comfy};`);
  const dir = mkdtempSync(join(tmpdir(), "gpu-turnstile-nginx-"));
  const temp = ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"].map((t) => `${t}_temp_path ${dir};`).join(" ");
  writeFileSync(join(dir, "nginx.conf"), `daemon off;\npid ${dir}/nginx.pid;\nerror_log ${dir}/error.log;\nevents {}\nhttp {\n  access_log off;\n  ${temp}\n${cfg}\n}\n`);
  const proc = Bun.spawn([NGINX, "-c", join(dir, "nginx.conf"), "-p", dir], { stdout: "ignore", stderr: "pipe" });
  nginx = {
    ollama: `http://127.0.0.1:${ollama}`,
    comfy: `http://127.0.0.1:${comfy}`,
    async stop() {
      proc.kill();
      await proc.exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await until(async () => (await fetch(`${nginx!.ollama}/api/tags`).catch(() => undefined))?.status === 200, "nginx answers");
});

afterAll(async () => {
  await nginx?.stop();
  for (const c of cards) await c.t.settled();
  await Promise.all(cards.map((c) => c.stop()));
  for (const [i, c] of cards.entries()) expect({ card: i + 1, overlaps: c.gpu.overlaps() }).toEqual({ card: i + 1, overlaps: [] });
});

const chat = () =>
  fetch(`${nginx!.ollama}/api/chat`, { method: "POST", body: JSON.stringify({ model: "llama3.2", stream: false, messages: [{ role: "user", content: "hi" }] }) }).then(async (r) => {
    await r.text();
    return r.status;
  });

describe.skipIf(!NGINX)("nginx in front of two cards, from deploy/nginx.conf", () => {
  test("chats go to the card without an image job at once; when both run one, a chat waits instead of failing", async () => {
    for (const c of cards) c.ollama!.clearCalls();
    await submit(cards[0]!.t, promptBody(newPromptId(), { sim_job_ms: 1200 }));
    await until(() => cards[0]!.t.lock.state === "image", "card 1 runs an image job");
    const t0 = performance.now();
    expect(await Promise.all(Array.from({ length: 4 }, chat))).toEqual([200, 200, 200, 200]);
    expect(performance.now() - t0).toBeLessThan(1000);
    expect(cards[0]!.t.lock.state).toBe("image");
    expect([callsTo(cards[0]!.ollama!.calls, "/api/chat").length, callsTo(cards[1]!.ollama!.calls, "/api/chat").length]).toEqual([0, 4]);

    await submit(cards[1]!.t, promptBody(newPromptId(), { sim_job_ms: 400 }));
    await until(() => cards[1]!.t.lock.state === "image", "card 2 runs an image job too");
    expect(await chat()).toBe(200);
    // It waited at a card (the other refused it first) and ran once the job there had ended.
    expect(callsTo(cards[0]!.ollama!.calls, "/api/chat").length + callsTo(cards[1]!.ollama!.calls, "/api/chat").length).toBe(5);
  }, 15_000);

  test("a ComfyUI client's /prompt, /history and /view reach one card", async () => {
    await Promise.all(cards.map((c) => c.t.settled()));
    for (const c of cards) c.comfy!.clearCalls();
    const res = await fetch(`${nginx!.comfy}/prompt`, { method: "POST", headers: { "content-type": "application/json" }, body: promptBody(newPromptId(), { sim_job_ms: 100 }) });
    expect(res.status).toBe(200);
    const { prompt_id: id } = (await res.json()) as { prompt_id: string };
    const card = cards.findIndex((c) => callsTo(c.comfy!.calls, "/prompt", "POST").length === 1);
    expect(card).toBeGreaterThanOrEqual(0);
    let outputs: Record<string, { images: { filename: string }[] }> | undefined;
    await until(async () => {
      const h = (await (await fetch(`${nginx!.comfy}/history/${id}`)).json()) as Record<string, { outputs: typeof outputs }>;
      outputs = h[id]?.outputs;
      return outputs !== undefined && Object.keys(outputs).length > 0;
    }, "the job's history through nginx");
    const file = Object.values(outputs!)[0]!.images[0]!.filename;
    expect((await fetch(`${nginx!.comfy}/view?filename=${encodeURIComponent(file)}&type=output`)).status).toBe(200);
    const other = cards[1 - card]!.comfy!.calls.filter((x) => x.headers["x-forwarded-for"] !== undefined);
    expect(other.map((x) => x.path)).toEqual([]);
  });

  test("a chat whose client gives up while a card holds it is never run (nginx passes the abort on)", async () => {
    await Promise.all(cards.map((c) => c.t.settled()));
    for (const c of cards) c.ollama!.clearCalls();
    let abandoned = 0;
    const offs = cards.map((c) => c.t.lock.onEvent((e) => void (e.type === "abandoned" && e.kind === "llm" && abandoned++)));
    try {
      for (const c of cards) expect((await submit(c.t, promptBody(newPromptId(), { sim_job_ms: 2500 }))).status).toBe(200);
      await until(() => cards.every((c) => c.t.lock.state === "image"), "both cards run an image job");
      const gaveUp = new AbortController();
      const outcome = fetch(`${nginx!.ollama}/api/chat`, {
        method: "POST",
        body: JSON.stringify({ model: "llama3.2", stream: false, messages: [{ role: "user", content: "anyone there?" }] }),
        signal: gaveUp.signal,
      }).then(
        (r) => `answered ${r.status}`,
        (e: unknown) => (e instanceof Error ? e.name : String(e)),
      );
      // Both cards refused it at once; error_page sent it to wait at one of them.
      await until(() => cards.some((c) => c.t.lock.snapshot().llmWaiting > 0), "a card holds the chat");
      setTimeout(() => gaveUp.abort(), 1000);
      expect(await outcome).toBe("AbortError");
      await until(() => abandoned > 0, "the card's turnstile gives the chat up");
      await Promise.all(cards.map((c) => c.t.settled()));
      expect(cards.map((c) => callsTo(c.ollama!.calls, "/api/chat").length)).toEqual([0, 0]);
    } finally {
      for (const off of offs) off();
    }
  }, 15_000);

  test("clients from one /24 (127.0.0.x) spread over both cards, and each client's calls stay on its card", async () => {
    await Promise.all(cards.map((c) => c.t.settled()));
    for (const c of cards) c.comfy!.clearCalls();
    // 16 hosts of one home LAN: ip_hash put all of them on one card.
    const clients = Array.from({ length: 16 }, (_, i) => `127.0.0.${i + 10}`);
    await Promise.all(
      clients.map(async (from) => {
        const id = newPromptId();
        expect((await fromAddress(from, "POST", "/prompt", promptBody(id, { sim_job_ms: 5 }))).status).toBe(200);
        expect((await fromAddress(from, "GET", `/history/${id}`)).status).toBe(200);
        await fromAddress(from, "GET", `/view?filename=${from}.png&type=output`);
      }),
    );
    const cardsOf = (from: string) => cards.flatMap((c, i) => (c.comfy!.calls.some((x) => x.headers["x-test-client"] === from) ? [i] : []));
    const placement = Object.fromEntries(clients.map((from) => [from, cardsOf(from)]));
    // Every client's /prompt, /history and /view reached one card, and only that one.
    for (const from of clients) {
      expect({ from, cards: placement[from]!.length }).toEqual({ from, cards: 1 });
      const paths = cards[placement[from]![0]!]!.comfy!.calls.filter((x) => x.headers["x-test-client"] === from).map((x) => x.path.split("/")[1]);
      expect({ from, paths: [...new Set(paths)].sort() }).toEqual({ from, paths: ["history", "prompt", "view"] });
    }
    const perCard = [0, 1].map((card) => clients.filter((from) => placement[from]![0] === card).length);
    expect({ perCard, bothCardsHaveClients: perCard.every((n) => n > 0) }).toEqual({ perCard, bothCardsHaveClients: true });
  }, 15_000);

  test("two clients of one card, from two addresses, are two clients there: the second's job is next in line, not behind the first's three", async () => {
    await Promise.all(cards.map((c) => c.t.settled()));
    for (const c of cards) c.comfy!.clearCalls();
    // Which card nginx's hash gives each address: of any three, two share one.
    const candidates = ["127.0.0.40", "127.0.0.41", "127.0.0.42"];
    const cardOf = new Map<string, number>();
    for (const from of candidates) {
      await fromAddress(from, "GET", `/history/${newPromptId()}`);
      cardOf.set(from, cards.findIndex((c) => c.comfy!.calls.some((x) => x.headers["x-test-client"] === from)));
    }
    const [a, b] = candidates.filter((from) => candidates.some((o) => o !== from && cardOf.get(o) === cardOf.get(from)));
    expect(cardOf.get(a!)).toBeGreaterThanOrEqual(0);
    await twoClientsOnOneCard(nginx!.comfy, cards[cardOf.get(a!)!]!, a!, b!);
  }, 15_000);
});

/** One request to nginx's ComfyUI side from a given local address (one host of the LAN), tagged with it. */
function fromAddress(from: string, method: string, path: string, body?: string): Promise<{ status: number }> {
  return from_(nginx!.comfy, from, method, path, body);
}
