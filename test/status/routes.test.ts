import { expect, test } from "bun:test";
import { GpuLock } from "../../src/lock/index.ts";
import { EventHub } from "../../src/status/events.ts";
import { StatusModel, type StatusDoc } from "../../src/status/model.ts";
import { statusRoutes } from "../../src/status/routes.ts";

const TOKEN = "admin-token-0123456789";

function routes() {
  const lock = new GpuLock();
  const model = new StatusModel({ version: "v1", lock, upstreams: ["ollama"] });
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
