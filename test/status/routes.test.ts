import { expect, test } from "bun:test";
import { GpuLock } from "../../src/lock/index.ts";
import { EventHub } from "../../src/status/events.ts";
import { StatusModel, type StatusDoc } from "../../src/status/model.ts";
import { statusRoutes } from "../../src/status/routes.ts";
import { bareSteering } from "./helpers.ts";

const TOKEN = "admin-token-0123456789";

function routes() {
  const lock = new GpuLock();
  const model = new StatusModel({ version: "v1", upstreams: ["ollama"] });
  model.start("/api/chat", "10.0.0.7");
  return statusRoutes({ model, hub: new EventHub({ model }), adminToken: TOKEN });
}

async function clients(res: Response): Promise<(string | undefined)[]> {
  return ((await res.json()) as StatusDoc).llm.requests.map((r) => r.client);
}

const get = (headers: Record<string, string> = {}) => new Request("http://t/turnstile/status", { headers });

test("client addresses are shown to loopback and to the admin token only", async () => {
  const r = routes();
  expect(await clients(await r(get(), "127.0.0.1"))).toEqual(["10.0.0.7"]);
  expect(await clients(await r(get(), "127.8.9.1"))).toEqual(["10.0.0.7"]);
  expect(await clients(await r(get({ authorization: `Bearer ${TOKEN}` }), "192.168.1.5"))).toEqual(["10.0.0.7"]);
  expect(await clients(await r(get(), "192.168.1.5"))).toEqual([undefined]);
  expect(await clients(await r(get({ authorization: "Bearer wrong" }), "127.0.0.1"))).toEqual([undefined]);
});

test("steering: a non-loopback client without the token gets 403 JSON, 127.x and the token pass; can_steer tells the page", async () => {
  const lock = new GpuLock();
  const model = new StatusModel({ version: "v1", upstreams: [] });
  const steering = bareSteering(lock, model);
  const r = statusRoutes({ model, hub: new EventHub({ model }), adminToken: TOKEN, steering });
  const post = (headers: Record<string, string> = {}) => new Request("http://t/turnstile/release", { method: "POST", headers });
  const refused = await r(post(), "192.168.1.5");
  expect(refused.status).toBe(403);
  expect(((await refused.json()) as { error: string }).error).toContain("ADMIN_TOKEN");
  expect((await r(post(), "127.8.9.1")).status).toBe(200);
  expect((await r(post({ authorization: `Bearer ${TOKEN}` }), "192.168.1.5")).status).toBe(200);
  expect((await r(post({ authorization: "Bearer wrong-token" }), "127.0.0.1")).status).toBe(403);
  const steer = async (ip: string) => ((await (await r(get(), ip)).json()) as { can_steer: boolean }).can_steer;
  expect(await steer("127.0.0.1")).toBe(true);
  expect(await steer("192.168.1.5")).toBe(false);
  // A malformed lease request gets a 400 that says what is wrong, never a 500.
  const bad = await r(new Request("http://t/turnstile/lease", { method: "POST", body: '{"ttl": 5}' }), "127.0.0.1");
  expect(bad.status).toBe(400);
  expect(((await bad.json()) as { error: string }).error).toContain("ttl must be a duration");
  const lease = await r(new Request("http://t/turnstile/lease", { method: "POST", body: '{"holder":"game","ttl":"1m"}' }), "127.0.0.1");
  expect(lease.status).toBe(200);
  expect(lock.state).toBe("lease");
  expect(((await (await r(get(), "127.0.0.1")).json()) as StatusDoc).lease).toMatchObject({ holder: "game" });
  steering.stop();
  expect(lock.state).toBe("idle");
});

test("a lease taken without a holder name does not show its taker's address to readers who may not see addresses", async () => {
  const lock = new GpuLock();
  const model = new StatusModel({ version: "v1", upstreams: [] });
  const steering = bareSteering(lock, model);
  const r = statusRoutes({ model, hub: new EventHub({ model }), adminToken: TOKEN, steering });
  const lease = await r(new Request("http://t/turnstile/lease", { method: "POST", headers: { authorization: `Bearer ${TOKEN}` } }), "10.0.0.9");
  expect(lease.status).toBe(200);
  expect(JSON.stringify(await (await r(get(), "192.168.1.5")).json())).not.toContain("10.0.0.9");
  steering.stop();
});
