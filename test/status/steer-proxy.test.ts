/**
 * Issue 26 point 9: behind nginx or HAProxy on the same machine every client arrives from
 * 127.0.0.1. A request that carries Forwarded, X-Forwarded-For or X-Real-IP is not a loopback
 * client, unless TRUSTED_PROXIES names its loopback peer and the client the headers name (the
 * rightmost hop not a trusted proxy, every header agreeing) is loopback, as is every hop skipped.
 * A balancer on another machine may be named (issue 30: clients told apart behind it), but never
 * makes a request a loopback client.
 */
import { describe, expect, test } from "bun:test";
import { parseSetting } from "../../src/config/schema.ts";
import { SETTINGS } from "../../src/config/settings.ts";
import { GpuLock } from "../../src/lock/index.ts";
import { parseTrustedProxies, type TrustedProxies } from "../../src/fair/forwarded.ts";
import { clientBehindProxy } from "../../src/status/auth.ts";
import { EventHub } from "../../src/status/events.ts";
import { StatusModel, type StatusDoc } from "../../src/status/model.ts";
import { statusRoutes } from "../../src/status/routes.ts";
import { placeInLine, type LineClient } from "../../src/status/line.ts";
import { fairSetup } from "../../src/fair/setup.ts";
import { bareSteering } from "./helpers.ts";

const TOKEN = "admin-token-0123456789";

function trusted(text: string): TrustedProxies {
  const p = parseTrustedProxies(text);
  if (!p.ok) throw new Error(p.message);
  return p.proxies;
}

function setup(trustedProxies?: TrustedProxies) {
  const lock = new GpuLock();
  const model = new StatusModel({ version: "v1", upstreams: [] });
  model.start("/api/chat", "10.0.0.7");
  const steering = bareSteering(lock, model);
  return { lock, steering, routes: statusRoutes({ model, hub: new EventHub({ model }), adminToken: TOKEN, steering, trustedProxies }) };
}

const post = (path: string, headers: Record<string, string> = {}) => new Request(`http://t${path}`, { method: "POST", headers: { host: "127.0.0.1:11434", ...headers } });
const get = (path: string, headers: Record<string, string> = {}) => new Request(`http://t${path}`, { headers: { host: "127.0.0.1:11434", ...headers } });

describe("a proxy on this machine", () => {
  test.each([
    ["X-Forwarded-For", "203.0.113.9"],
    ["X-Real-IP", "192.168.1.20"],
    ["Forwarded", 'for="[2001:db8::1]:4711";proto=http'],
    // A client that claims to be loopback itself is still relayed: the proxy is not named.
    ["X-Forwarded-For", "127.0.0.1"],
  ])("a request with %s from 127.0.0.1 may neither force-release nor take a lease, nor see client addresses", async (header, value) => {
    const { routes, lock } = setup();
    for (const path of ["/turnstile/release", "/turnstile/lease"]) {
      const res = await routes(post(path, { [header]: value }), "127.0.0.1");
      expect(res.status).toBe(403);
      const error = ((await res.json()) as { error: string }).error;
      expect(error).toContain(`carries ${header}`);
      expect(error).toContain("TRUSTED_PROXIES");
    }
    expect(lock.state).toBe("idle");
    const doc = (await (await routes(get("/turnstile/status", { [header]: value }), "::ffff:127.0.0.1")).json()) as StatusDoc & { can_steer: boolean };
    expect(doc.can_steer).toBe(false);
    expect(doc.llm.requests.map((r) => r.client)).toEqual([undefined]);
    // The token still passes through the proxy.
    const withToken = await routes(post("/turnstile/release", { [header]: value, authorization: `Bearer ${TOKEN}` }), "127.0.0.1");
    expect(withToken.status).toBe(200);
  });

  test("without forwarding headers, loopback steers as before", async () => {
    const { routes } = setup();
    expect((await routes(post("/turnstile/release"), "127.0.0.1")).status).toBe(200);
  });

  test("a proxy named in TRUSTED_PROXIES passes a loopback client it names, and only that", async () => {
    const { routes } = setup(trusted(" 127.0.0.1 , ::1"));
    expect((await routes(post("/turnstile/release", { "x-forwarded-for": "127.0.0.1", "x-real-ip": "127.0.0.1" }), "127.0.0.1")).status).toBe(200);
    // The client's own words come first; the rightmost hop that is no trusted proxy decides.
    expect((await routes(post("/turnstile/release", { "x-forwarded-for": "127.0.0.1, 203.0.113.9" }), "127.0.0.1")).status).toBe(403);
    // HAProxy then nginx, both on this machine (both 127.0.0.1): the LAN client HAProxy named is
    // the client, not the hop nginx appended. (The last-hop rule before issue 30 let it steer.)
    expect((await routes(post("/turnstile/release", { "x-forwarded-for": "203.0.113.9, 127.0.0.1" }), "127.0.0.1")).status).toBe(403);
    // A header the proxy passed through from the client does not outvote the one it wrote.
    expect((await routes(post("/turnstile/release", { "x-real-ip": "192.168.1.20", forwarded: "for=127.0.0.1" }), "::ffff:127.0.0.1")).status).toBe(403);
    // Another loopback peer (not named) is not that proxy.
    expect((await routes(post("/turnstile/release", { "x-forwarded-for": "127.0.0.1" }), "127.0.0.2")).status).toBe(403);
  });
});

describe("a balancer on another machine, named in TRUSTED_PROXIES", () => {
  const both = () => setup(trusted("127.0.0.1, 192.168.1.5, 10.9.0.0/16"));
  test("an X-Forwarded-For of 127.0.0.1 through it never steers and never sees client addresses", async () => {
    const { routes, lock } = both();
    for (const [peer, xff] of [
      // Straight from the balancer.
      ["192.168.1.5", "127.0.0.1"],
      ["::ffff:192.168.1.5", "127.0.0.1"],
      ["10.9.3.4", "::1"],
      // Through the balancer, then nginx on this machine (which appends the balancer's address).
      ["127.0.0.1", "127.0.0.1, 192.168.1.5"],
      ["127.0.0.1", "10.0.0.66, 127.0.0.1, 192.168.1.5"],
    ] as const) {
      for (const path of ["/turnstile/release", "/turnstile/lease"]) {
        const res = await routes(post(path, { "x-forwarded-for": xff }), peer);
        expect({ peer, xff, path, status: res.status }).toEqual({ peer, xff, path, status: 403 });
      }
      const doc = (await (await routes(get("/turnstile/status", { "x-forwarded-for": xff }), peer)).json()) as StatusDoc & { can_steer: boolean };
      expect({ peer, xff, canSteer: doc.can_steer, clients: doc.llm.requests.map((r) => r.client) }).toEqual({ peer, xff, canSteer: false, clients: [undefined] });
    }
    expect(lock.state).toBe("idle");
    // The token still passes through it.
    expect((await routes(post("/turnstile/release", { "x-forwarded-for": "127.0.0.1", authorization: `Bearer ${TOKEN}` }), "192.168.1.5")).status).toBe(200);
    // And loopback without forwarding headers is as it was.
    expect((await routes(post("/turnstile/release"), "127.0.0.1")).status).toBe(200);
  });

  test("a reader behind it sees its own place in line, told by the address it forwards; a spoofed header from anyone else tells nothing", async () => {
    const s = fairSetup({ fairClasses: "interactive:4,normal:2,batch:1", fairChatsFirst: "batch", clientsFile: "", trustedProxies: "192.168.1.5" }, undefined);
    if (!s.ok) throw new Error(s.message);
    const fair = s.fair;
    const lock = new GpuLock();
    const chat = lock.tryAcquireLLM()!;
    void lock.acquireImage(undefined, { client: "10.0.0.9", cls: "normal", tag: 1 });
    void lock.acquireImage(undefined, { client: "10.0.0.7", cls: "normal", tag: 2 });
    const model = new StatusModel({ version: "v1", upstreams: ["comfy"] });
    const routes = statusRoutes({
      model,
      hub: new EventHub({ model }),
      adminToken: TOKEN,
      trustedProxies: fair.trustedProxies,
      line: (seen) => placeInLine({ image: lock.imageLine(), llm: lock.llmLine() }, () => 5, seen && fair.identify(seen).client),
    });
    const read = async (peer: string, xff: string) => (await (await routes(get("/turnstile/status", { "x-forwarded-for": xff }), peer)).json()) as { line: LineClient[]; can_steer: boolean };
    const mine = await read("192.168.1.5", "6.6.6.6, 10.0.0.9");
    expect(mine).toMatchObject({ can_steer: false, line: [{ client: "10.0.0.9", jobs: [{ job: 1, position: 1 }] }] });
    expect(JSON.stringify(mine.line)).not.toContain("10.0.0.7");
    expect((await read("10.0.0.66", "10.0.0.9")).line).toEqual([]);
    chat.release();
  });
});

describe("clientBehindProxy, pure", () => {
  const h = (o: Record<string, string>) => new Headers(o);
  test("only a loopback peer's headers matter", () => {
    expect(clientBehindProxy("10.0.0.5", h({ "x-forwarded-for": "127.0.0.1" }), trusted("10.0.0.5, 127.0.0.1"))).toEqual({ address: "10.0.0.5" });
    expect(clientBehindProxy("127.0.0.1", h({}), [])).toEqual({ address: "127.0.0.1" });
    expect(clientBehindProxy("127.0.0.1", h({ "x-real-ip": "127.0.0.1" }), [])).toEqual({ address: undefined, proxied: "X-Real-IP" });
  });
  test("the client the headers name, in the forms proxies write it; anything else is nobody", () => {
    const local = trusted("127.0.0.1");
    expect(clientBehindProxy("127.0.0.1", h({ forwarded: 'for=192.0.2.60;proto=http, for="[::1]:4711"' }), local)).toEqual({ address: "::1" });
    expect(clientBehindProxy("127.0.0.1", h({ forwarded: "for=127.0.0.1:5555" }), local)).toEqual({ address: "127.0.0.1" });
    expect(clientBehindProxy("::ffff:127.0.0.1", h({ "x-forwarded-for": "127.0.0.1" }), local)).toEqual({ address: "127.0.0.1" });
    expect(clientBehindProxy("127.0.0.1", h({ forwarded: "for=unknown" }), local)).toEqual({ address: undefined, proxied: "Forwarded" });
    expect(clientBehindProxy("127.0.0.1", h({ forwarded: "proto=https" }), local)).toEqual({ address: undefined, proxied: "Forwarded" });
    expect(clientBehindProxy("127.0.0.1", h({ "x-forwarded-for": "" }), local)).toEqual({ address: undefined, proxied: "X-Forwarded-For" });
    expect(clientBehindProxy("127.0.0.1", h({ "x-forwarded-for": "203.0.113.9" }), local)).toEqual({ address: undefined, proxied: "X-Forwarded-For" });
  });
});

test("TRUSTED_PROXIES takes addresses and ranges, on this machine or another; the loader refuses anything else by its line", () => {
  const def = SETTINGS.find((d) => d.key === "TRUSTED_PROXIES")!;
  for (const ok of ["", "127.0.0.1", "127.0.0.1, ::1", "[::1]", "192.168.1.5", "10.0.0.0/24, fd00::/8", "[fd00::1]/128"]) {
    expect({ ok, r: parseSetting(def, ok).ok }).toEqual({ ok, r: true });
  }
  for (const bad of ["localhost", "*", "10.0.0.2 10.0.0.3", "10.0.0.0/", "balancer.lan"]) {
    expect(parseSetting(def, bad)).toEqual({ ok: false, message: "expected comma-separated IP addresses or ranges of proxies (127.0.0.1, 192.168.1.5, 10.0.0.0/24, ::1)" });
  }
});
