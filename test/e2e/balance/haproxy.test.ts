/**
 * The proof of issue 20: a real HAProxy, run from the shipped recipe (deploy/haproxy.cfg), in front
 * of two turnstiles, each with its own simulated card. Chats avoid the card that runs an image job,
 * image jobs spread over the free cards, a client's follow-up calls reach its card, two clients on
 * one card are two clients there (TRUSTED_PROXIES), and each card's ledger shows no overlap. Skips with a note when haproxy (Debian package `haproxy`) is missing.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { findHaproxy, startHaproxy, type RunningHaproxy } from "../../../src/demo/haproxy.ts";
import { callsTo, newPromptId, promptBody, startStack, until, type Stack } from "../jobs/helpers.ts";
import { scrape } from "../proxy/helpers.ts";
import { sampleValue } from "../../support/prom-parse.ts";
import { twoClientsOnOneCard } from "./from-address.ts";

const haproxy = findHaproxy();
if (!haproxy) console.warn("haproxy is not installed (Debian package haproxy, .ci/system-deps.sh): the HAProxy recipe test is skipped");

let cards: Stack[] = [];
let lb: RunningHaproxy;

beforeAll(async () => {
  if (!haproxy) return;
  // HAProxy connects from 127.0.0.1: the README's TRUSTED_PROXIES for a balancer on the cards' machine.
  cards = [await startStack({ env: { CARD_NAME: "card1", TRUSTED_PROXIES: "127.0.0.1" } }), await startStack({ env: { CARD_NAME: "card2", TRUSTED_PROXIES: "127.0.0.1" } })];
  const addr = (u: string) => new URL(u).host;
  lb = await startHaproxy(haproxy.path, cards.map((c) => ({ ollama: addr(c.t.ollamaUrl), comfy: addr(c.t.comfyUrl) })));
});

afterAll(async () => {
  await lb?.stop();
  await Promise.all(cards.map((c) => c.stop()));
  for (const [i, c] of cards.entries()) expect({ card: i + 1, overlaps: c.gpu.overlaps() }).toEqual({ card: i + 1, overlaps: [] });
});

/** Busy answers a card's turnstile gave (gpu_turnstile_busy_total{reason="reject"}). */
async function busyAnswers(card: number): Promise<number> {
  return sampleValue(await scrape(cards[card]!.t.ollamaUrl), "gpu_turnstile_busy_total", { reason: "reject" }) ?? 0;
}

const busyCard = () => cards.findIndex((c) => c.t.lock.state === "image");
const sessionCookie = (res: Response) => res.headers.get("set-cookie")?.split(";")[0];

/** A ComfyUI client as the SDKs are: a websocket with its clientId, /prompt with client_id, then /history and /view. */
class Client {
  readonly id = crypto.randomUUID().replaceAll("-", "");
  readonly ws: WebSocket;
  readonly done = new Map<string, () => void>();
  readonly finished = new Set<string>();
  cookie: string | undefined;

  constructor(readonly name: string, readonly keepsCookies: boolean) {
    this.ws = new WebSocket(`${lb.comfy.replace("http", "ws")}/ws?clientId=${this.id}`);
    this.ws.onmessage = (m) => {
      if (typeof m.data !== "string") return;
      const e = JSON.parse(m.data) as { type: string; data: { prompt_id?: string } };
      if (e.type === "execution_success" && e.data.prompt_id) this.finished.add(e.data.prompt_id);
    };
  }

  opened(): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.ws.readyState === WebSocket.OPEN) return resolve();
      this.ws.onopen = () => resolve();
      this.ws.onerror = () => reject(new Error(`${this.name}: websocket failed`));
    });
  }

  async fetch(path: string, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    if (this.cookie) headers.set("cookie", this.cookie);
    const res = await fetch(`${lb.comfy}${path}`, { ...init, headers });
    if (this.keepsCookies) this.cookie = sessionCookie(res) ?? this.cookie;
    return res;
  }

  async prompt(jobMs: number): Promise<string> {
    const promptId = newPromptId();
    const body = promptBody(promptId, { sim_job_ms: jobMs }, (p) => {
      for (const node of Object.values(p) as { class_type: string; inputs: Record<string, unknown> }[]) if (node.class_type === "SaveImage") node.inputs.filename_prefix = this.name;
    });
    const res = await this.fetch("/prompt", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ ...JSON.parse(body), client_id: this.id }) });
    expect(res.status).toBe(200);
    return ((await res.json()) as { prompt_id: string }).prompt_id;
  }

  /** /history/<id> until it has outputs, then the first image through /view; returns its filename. */
  async collect(promptId: string): Promise<string> {
    await until(() => this.finished.has(promptId), `${this.name}'s websocket reports its job finished`, 10_000);
    const h = (await (await this.fetch(`/history/${promptId}`)).json()) as Record<string, { outputs: Record<string, { images: { filename: string }[] }> }>;
    const image = Object.values(h[promptId]!.outputs)[0]!.images[0]!;
    const view = await this.fetch(`/view?filename=${encodeURIComponent(image.filename)}&type=output&subfolder=`);
    expect({ client: this.name, view: view.status }).toEqual({ client: this.name, view: 200 });
    await view.arrayBuffer();
    return image.filename;
  }
}

describe.skipIf(!haproxy)("HAProxy in front of two cards, from deploy/haproxy.cfg", () => {
  test("chats avoid the card that runs an image job, without waiting, even before HAProxy's check has seen it busy", async () => {
    for (const c of cards) c.ollama!.clearCalls();
    // Checks frozen with both cards UP: every chat that HAProxy sends to the busy card is the race
    // between two checks, which X-Turnstile-Wait: 0 and retry-on 503 must turn into a detour.
    await lb.command("disable health llm/card1");
    await lb.command("disable health llm/card2");
    const client = new Client("painter", false);
    await client.opened();
    const job = await client.prompt(1500);
    await until(() => busyCard() >= 0, "one card runs the image job");
    const busy = busyCard();
    const refusedBefore = await busyAnswers(busy);
    const chat = () =>
      fetch(`${lb.ollama}/api/chat`, { method: "POST", body: JSON.stringify({ model: "llama3.2", stream: false, messages: [{ role: "user", content: "hi" }] }) }).then(async (r) => [r.status, await r.text()] as const);
    const t0 = performance.now();
    const chats = await Promise.all(Array.from({ length: 6 }, chat));
    const chatMs = performance.now() - t0;
    expect(chats.map(([s]) => s)).toEqual([200, 200, 200, 200, 200, 200]);
    // Every chat ran on the free card while the image job still held the other; some were refused there first.
    expect(cards[busy]!.t.lock.state).toBe("image");
    expect(chatMs).toBeLessThan(1500);
    expect(callsTo(cards[busy]!.ollama!.calls, "/api/chat").length).toBe(0);
    expect(callsTo(cards[1 - busy]!.ollama!.calls, "/api/chat").length).toBe(6);
    expect(await busyAnswers(busy)).toBeGreaterThan(refusedBefore);

    // With its checks back, HAProxy takes the busy card out of rotation: chats no longer try it.
    await lb.command("enable health llm/card1");
    await lb.command("enable health llm/card2");
    await until(async () => (await lb.servers())[`llm/card${busy + 1}`] === "DOWN", "HAProxy's readyz check sees the busy card");
    const refused = await busyAnswers(busy);
    expect((await Promise.all(Array.from({ length: 4 }, chat))).map(([s]) => s)).toEqual([200, 200, 200, 200]);
    expect(await busyAnswers(busy)).toBe(refused);
    await client.collect(job);
    client.ws.close();
  });

  test("when every card runs an image job, a chat waits at one of them instead of failing", async () => {
    await Promise.all(cards.map((c) => c.t.settled()));
    const a = new Client("carol", false);
    await a.opened();
    const jobA = await a.prompt(600);
    await until(() => busyCard() >= 0, "carol's job runs");
    await until(async () => (await lb.servers())[`comfy/card${busyCard() + 1}`] === "DOWN", "HAProxy sees carol's card busy");
    // Dave connects now: his websocket, and so his job, go to the card that is still free.
    const b = new Client("dave", false);
    await b.opened();
    const jobB = await b.prompt(600);
    await until(() => cards.every((c) => c.t.lock.state === "image"), "both cards run an image job");
    await until(async () => Object.entries(await lb.servers()).filter(([k, v]) => k.startsWith("llm/") && v === "DOWN").length === 2, "HAProxy sees no card ready for chats");
    const res = await fetch(`${lb.ollama}/api/chat`, { method: "POST", body: JSON.stringify({ model: "llama3.2", stream: false, messages: [{ role: "user", content: "hi" }] }) });
    expect(res.status).toBe(200);
    await res.text();
    // One after the other: both are cookie-less clients on one address, whose /view goes by address (the recipe's stated limit).
    await a.collect(jobA);
    await b.collect(jobB);
    a.ws.close();
    b.ws.close();
  }, 15_000);

  test("image jobs spread over the free cards, and each client's /ws, /prompt, /history and /view reach its card", async () => {
    await Promise.all(cards.map((c) => c.t.settled()));
    await until(async () => Object.values(await lb.servers()).every((s) => s === "UP"), "HAProxy sees both cards ready again");
    for (const c of cards) c.comfy!.clearCalls();
    // A browser-like client (a cookie jar) and a script (none): both stay on their card.
    const a = new Client("alice", true);
    await a.opened();
    const jobA = await a.prompt(800);
    await until(() => busyCard() >= 0, "alice's job runs");
    const cardA = busyCard();
    await until(async () => (await lb.servers())[`comfy/card${cardA + 1}`] === "DOWN", "HAProxy takes alice's card out of rotation for new image clients");
    const b = new Client("bob", false);
    await b.opened();
    const jobB = await b.prompt(400);
    await until(() => cards.every((c) => c.t.lock.state === "image"), "both cards run an image job at once");

    const fileA = await a.collect(jobA);
    const fileB = await b.collect(jobB);
    const cardB = 1 - cardA;
    // Calls a client made (forwarded by the turnstile), not the turnstile's own polling of /history.
    const fromClients = (card: number) => cards[card]!.comfy!.calls.filter((x) => x.headers["x-forwarded-for"] !== undefined);
    const seen = (card: number, path: string | RegExp) => callsTo(fromClients(card), path).length;
    // Each job ran on its client's card, and every follow-up went there and nowhere else.
    expect([seen(cardA, "/prompt"), seen(cardB, "/prompt")]).toEqual([1, 1]);
    for (const [card, other, id, file] of [[cardA, cardB, jobA, fileA], [cardB, cardA, jobB, fileB]] as const) {
      expect([seen(card, `/history/${id}`), seen(other, `/history/${id}`)]).toEqual([1, 0]);
      const view = (c: number) => fromClients(c).filter((x) => x.path === "/view" && x.query.includes(encodeURIComponent(file))).length;
      expect([view(card), view(other)]).toEqual([1, 0]);
    }
    a.ws.close();
    b.ws.close();
  });

  test("two clients of one card, from two addresses, are two clients there: the second's job is next in line, not behind the first's three", async () => {
    await Promise.all(cards.map((c) => c.t.settled()));
    // HAProxy's own cookie keeps both on card 1, also while its lease takes it out of rotation.
    await twoClientsOnOneCard(lb.comfy, cards[0]!, "127.0.0.50", "127.0.0.51", { cookie: "TURNSTILE_CARD=card1" });
  }, 15_000);
});
