/**
 * Clients of one LAN through a real balancer, each from its own source address (127.0.0.x works
 * on Linux loopback), and the check both recipe tests share: two such clients on one card are two
 * clients there (TRUSTED_PROXIES), not one — the balancer's address.
 */
import { expect } from "bun:test";
import { request } from "node:http";
import type { LineClient } from "../../../src/status/line.ts";
import { callsTo, newPromptId, promptBody, until, type Stack } from "../jobs/helpers.ts";

/** One request to `base` from the local address `from`, tagged with it (x-test-client). */
export function fromAddress(base: string, from: string, method: string, path: string, body?: string, headers: Record<string, string> = {}): Promise<{ status: number }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request(
      { host: url.hostname, port: url.port, method, path, localAddress: from, headers: { "x-test-client": from, "content-type": "application/json", connection: "close", ...headers } },
      (res) => {
        res.resume();
        res.on("end", () => resolve({ status: res.statusCode ?? 0 }));
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

/**
 * While a GPU lease holds `card`, client `a` queues three image jobs through the balancer at
 * `base`, then client `b` one, with an X-Forwarded-For of its own that names `a` (the leftmost hop,
 * the client's own words). Both reach `card` (`headers`: what keeps them there, e.g. the balancer's
 * cookie). Told apart by the address the balancer forwards, b is second in line and its job goes to
 * ComfyUI right after a's first (fair turns); as one client — the balancer — it would be last.
 */
export async function twoClientsOnOneCard(base: string, card: Stack, a: string, b: string, headers: Record<string, string> = {}): Promise<void> {
  await card.t.settled();
  card.comfy!.clearCalls();
  const sent = () => callsTo(card.comfy!.calls, "/prompt", "POST").map((c) => JSON.parse(c.bodyText).prompt_id as string);
  const ids = { a: [newPromptId(), newPromptId(), newPromptId()], b: newPromptId() };
  // No client_id (a script's plain POST /prompt): the address is all that tells them apart.
  const body = (id: string) => JSON.stringify({ ...JSON.parse(promptBody(id, { sim_job_ms: 20 })), client_id: undefined });
  const post = (from: string, id: string, extra: Record<string, string> = {}) => fromAddress(base, from, "POST", "/prompt", body(id), { ...headers, ...extra });
  const lease = (await (await fetch(`${card.t.comfyUrl}/turnstile/lease`, { method: "POST", body: JSON.stringify({ holder: "line-test", ttl: "1m" }) })).json()) as { id: string };
  expect(card.t.lock.state).toBe("lease");
  const answers: Promise<{ status: number }>[] = [];
  try {
    for (const [i, id] of ids.a.entries()) {
      answers.push(post(a, id));
      await until(() => card.t.lock.snapshot().imageWaiting === i + 1, `a's job ${i + 1} waiting`);
    }
    answers.push(post(b, ids.b, { "x-forwarded-for": a }));
    await until(() => card.t.lock.snapshot().imageWaiting === 4, "b's job waiting too");
    // The card's place in line, as its own loopback reader (every client) sees it.
    const status = (await (await fetch(`${card.t.comfyUrl}/turnstile/status`)).json()) as { line: LineClient[] };
    expect(status.line.map((c) => [c.client, c.jobs.map((j) => j.position)])).toEqual([
      [a, [1, 3, 4]],
      [b, [2]],
    ]);
  } finally {
    await fetch(`${card.t.comfyUrl}/turnstile/lease/${lease.id}`, { method: "DELETE" });
  }
  expect((await Promise.all(answers)).map((r) => r.status)).toEqual([200, 200, 200, 200]);
  await card.t.settled();
  expect(sent()).toEqual([ids.a[0]!, ids.b, ids.a[1]!, ids.a[2]!]);
}
