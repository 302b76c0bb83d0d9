/**
 * The status page in a real browser (Debian's `chromium`, driven over the DevTools protocol), in
 * every state an operator meets: idle, chats, an image session of several jobs, a lease, the
 * server gone and back — live from /turnstile/events. Saves a screenshot of each state to the temp
 * directory; with UPDATE_SCREENSHOT=1 the session's goes to docs/status-page.png (the README's; a
 * run would otherwise leave that file changed every time).
 * Skips with a note where chromium is missing.
 */
import { afterEach, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { newPromptId, postJson, promptBody, startStack, submit, until, type Stack } from "../e2e/jobs/helpers.ts";
import { startTestTurnstile, type TestTurnstile } from "../support/turnstile.ts";

const CHROMIUM = "/usr/bin/chromium";
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium) console.warn(`note: ${CHROMIUM} is missing; the status page browser test skips (apt-get install chromium)`);

/** A page in headless Chromium, spoken to over the DevTools protocol. */
async function openPage(url: string) {
  const profile = mkdtempSync(join(tmpdir(), "turnstile-chromium-"));
  const proc = Bun.spawn(
    [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run", "--no-proxy-server", `--user-data-dir=${profile}`, "--remote-debugging-port=0", "--window-size=900,1100", "about:blank"],
    { stdout: "ignore", stderr: "pipe" },
  );
  const reader = proc.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let err = "";
  let browserWs: string | undefined;
  while (!browserWs) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`chromium exited: ${err}`);
    err += value;
    browserWs = /DevTools listening on (ws:\/\/\S+)/.exec(err)?.[1];
  }
  void (async () => {
    while (!(await reader.read()).done);
  })();
  const port = new URL(browserWs).port;
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as { type: string; webSocketDebuggerUrl: string }[];
  const ws = new WebSocket(targets.find((t) => t.type === "page")!.webSocketDebuggerUrl);
  await new Promise((r, j) => ((ws.onopen = r), (ws.onerror = j)));
  let nextId = 1;
  const pending = new Map<number, (m: any) => void>();
  ws.onmessage = (m) => {
    const msg = JSON.parse(String(m.data));
    pending.get(msg.id)?.(msg);
    pending.delete(msg.id);
  };
  const send = (method: string, params: object = {}) =>
    new Promise<any>((resolve) => {
      const id = nextId++;
      pending.set(id, resolve);
      ws.send(JSON.stringify({ id, method, params }));
    });
  await send("Page.enable");
  await send("Page.navigate", { url });
  return {
    async text(selector: string): Promise<string> {
      const r = await send("Runtime.evaluate", { expression: `document.querySelector(${JSON.stringify(selector)})?.textContent ?? ""`, returnByValue: true });
      return r.result?.result?.value ?? "";
    },
    async run(expression: string): Promise<unknown> {
      const r = await send("Runtime.evaluate", { expression, returnByValue: true });
      return r.result?.result?.value;
    },
    async screenshot(path: string) {
      const r = await send("Page.captureScreenshot", { format: "png" });
      writeFileSync(path, Buffer.from(r.result.data, "base64"));
    },
    async close() {
      ws.close();
      proc.kill();
      await proc.exited;
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

let stack: Stack | undefined;
let page: Awaited<ReturnType<typeof openPage>> | undefined;
/** A turnstile started again on the stack's ports (the "server back" state). */
let again: TestTurnstile | undefined;
afterEach(async () => {
  await page?.close();
  await again?.close();
  await stack?.stop();
  page = undefined;
  stack = undefined;
  again = undefined;
});

/** Where each state's screenshot goes; the session's is the README's with UPDATE_SCREENSHOT=1. */
const shotPath = (name: string, readme = false) =>
  readme && process.env.UPDATE_SCREENSHOT === "1" ? new URL("../../docs/status-page.png", import.meta.url).pathname : join(tmpdir(), `gpu-turnstile-page-${name}.png`);

test.skipIf(!haveChromium)("every state of the page: idle, chats, a session of several jobs, a lease, the server gone and back", async () => {
  stack = await startStack({
    ollama: { tokenDelayMs: 100, tokens: 30 },
    comfy: { jobMs: 2000, freeDelayMs: 50 },
    env: { IMAGE_SESSION_MAX: "30s", HEALTH_INTERVAL: "1h" },
  });
  const { t } = stack;
  page = await openPage(`${t.comfyUrl}/turnstile/`);
  const p = page;
  const text = (sel: string) => p.text(sel);
  const shown = (sel: string, want: string, what: string) => until(async () => (await text(sel)).includes(want), what, 10_000);

  // Idle: live, the card as its upstreams last said.
  await until(async () => (await text("#state")) === "idle", "idle", 15_000);
  expect(await text("#conn")).toBe("live");
  await shown("#models", "Ollama holds no model", "Ollama's empty /api/ps");
  await shown("#card", "ComfyUI sees", "ComfyUI's memory");
  await p.screenshot(shotPath("idle"));

  // Chats: two streams hold the card.
  const chat = (model: string) => postJson(`${t.ollamaUrl}/api/chat`, { model, stream: true, messages: [{ role: "user", content: "hi" }] });
  const chats = [chat("llama3.2"), chat("llama3.2")];
  await shown("#llm-summary", "2 in flight", "two chats in flight");
  expect(await text("#state")).toBe("llm");
  await p.screenshot(shotPath("chats"));
  await Promise.all(chats.map(async (c) => (await c).text()));

  // A session of three jobs from one client with its /ws relayed: one runs with its step, two
  // queue in ComfyUI; a chat waits behind the session, and says so.
  const clientId = "page-client";
  const ws = new WebSocket(`${t.comfyUrl.replace("http", "ws")}/ws?clientId=${clientId}`);
  await new Promise((r, j) => ((ws.onopen = r), (ws.onerror = j)));
  const withClient = (id: string) => JSON.stringify({ ...JSON.parse(promptBody(id)), client_id: clientId });
  const ids = [newPromptId(), newPromptId(), newPromptId()];
  const jobs = ids.map((id) => submit(t, withClient(id)));
  await shown("#image", "2 queued in ComfyUI", "two jobs queued behind the running one");
  const jobsTable = await text("#jobs");
  for (const id of ids) expect(jobsTable).toContain(id);
  expect(jobsTable).toContain(`client_id ${clientId}`);
  expect(jobsTable).toContain("in ComfyUI's queue");
  await shown("#image", "step ", "the running job's step");
  const waiter = postJson(`${t.ollamaUrl}/api/chat`, { model: "qwen2.5:7b", stream: false, messages: [{ role: "user", content: "hi" }] });
  await shown("#waiting", "behind image job", "the chat waiting behind the session, with its reason");
  expect(await text("#waiting")).toMatch(/~\d+ s/);
  expect(await text("#phase")).toBe("running");
  await shown("#jobs", "/20", "a step in the jobs table");
  await p.screenshot(shotPath("session", true));
  await Promise.all(jobs.map(async (j) => (await j).text()));
  await (await waiter).text();
  ws.close();
  await t.settled();
  await shown("#state", "idle", "idle after the session");
  for (const id of ids) await shown("#recent", id, "the session's jobs in the recent list");
  expect(await text("#recent")).toContain("completed");
  expect(await text("#upstreams")).toContain("up");

  // A lease taken on the page: "Take a lease" waits while it is held; a second lease asked for
  // elsewhere shows as a lease waiting, not as an image job; force-release ends both.
  await until(async () => (await p.run(`document.querySelector("#steer").hidden === false`)) === true, "the steering controls", 10_000);
  await p.run(`document.querySelector("#holder").value = "browser test"; document.querySelector("#lease-form").requestSubmit()`);
  await shown("#lease", "taken here", "the page's own lease");
  expect(await p.run(`document.querySelector("#take").disabled`)).toBe(true);
  const queued = postJson(`${t.ollamaUrl}/turnstile/lease`, { holder: "trainer", ttl: "5m" });
  await shown("#lease", "trainer waits for the card", "the queued lease in the lease card");
  expect(await text("#waiting")).toContain("lease trainer");
  expect(await text("#image")).toContain("none running");
  await p.screenshot(shotPath("lease"));
  await p.run(`window.confirm = () => true; document.querySelector("#release").click()`);
  await shown("#steer-msg", "1 waiting lease(s) ended", "the release's answer, naming the waiting lease");
  expect(await text("#steer-msg")).toContain("lease revoked");
  expect((await queued).status).toBe(409);
  await shown("#state", "idle", "idle after the release");
  expect(await p.run(`document.querySelector("#take").disabled`)).toBe(false);

  // The server gone: everything live greys out, the buttons go dead, and the page says since when.
  const ports = { ollama: new URL(t.ollamaUrl).port, comfy: new URL(t.comfyUrl).port };
  await t.close();
  await until(async () => (await p.run(`document.body.classList.contains("stale")`)) === true, "the page greyed out", 10_000);
  expect(await text("#conn")).toMatch(/^connection lost since .+ ago\); reconnecting…$/);
  expect(await p.run(`[...document.querySelectorAll("#steer button")].filter((b) => !b.hidden).every((b) => b.disabled)`)).toBe(true);
  expect(await p.run(`getComputedStyle(document.querySelector("#state").parentElement).opacity`)).toBe("0.4");
  await p.screenshot(shotPath("gone"));

  // The server back on the same port: live again, with the new instance's state.
  again = startTestTurnstile({
    OLLAMA_URL: stack.ollama!.url,
    COMFY_URL: stack.comfy!.url,
    LISTEN_OLLAMA: `127.0.0.1:${ports.ollama}`,
    LISTEN_COMFY: `127.0.0.1:${ports.comfy}`,
  });
  await until(async () => (await text("#conn")) === "live", "the page live again", 15_000);
  expect(await p.run(`document.body.classList.contains("stale")`)).toBe(false);
  expect(await p.run(`document.querySelector("#take").disabled`)).toBe(false);
  await p.screenshot(shotPath("back"));
}, 90_000);
