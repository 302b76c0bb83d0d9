/**
 * Issue 26 point 9: behind nginx or HAProxy on the same machine every client arrives from
 * 127.0.0.1. A request that carries Forwarded, X-Forwarded-For or X-Real-IP is not a loopback
 * client, unless TRUSTED_PROXIES names its peer and every such header names loopback at its last hop.
 */
import { describe, expect, test } from "bun:test";
import { parseSetting } from "../../src/config/schema.ts";
import { SETTINGS } from "../../src/config/settings.ts";
import { GpuLock } from "../../src/lock/index.ts";
import { canonicalIp, clientBehindProxy, parseTrustedProxies } from "../../src/status/auth.ts";
import { EventHub } from "../../src/status/events.ts";
import { StatusModel, type StatusDoc } from "../../src/status/model.ts";
import { statusRoutes } from "../../src/status/routes.ts";
import { bareSteering } from "./helpers.ts";

const TOKEN = "admin-token-0123456789";

function setup(trustedProxies?: string[]) {
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
    const { routes } = setup(parseTrustedProxies(" 127.0.0.1 , ::1"));
    expect((await routes(post("/turnstile/release", { "x-forwarded-for": "203.0.113.9, 127.0.0.1", "x-real-ip": "127.0.0.1" }), "127.0.0.1")).status).toBe(200);
    // The client's own words come first; the proxy's last hop decides.
    expect((await routes(post("/turnstile/release", { "x-forwarded-for": "127.0.0.1, 203.0.113.9" }), "127.0.0.1")).status).toBe(403);
    // A header the proxy passed through from the client does not outvote the one it wrote.
    expect((await routes(post("/turnstile/release", { "x-real-ip": "192.168.1.20", forwarded: "for=127.0.0.1" }), "::ffff:127.0.0.1")).status).toBe(403);
    // Another loopback peer (not named) is not that proxy.
    expect((await routes(post("/turnstile/release", { "x-forwarded-for": "127.0.0.1" }), "127.0.0.2")).status).toBe(403);
  });
});

describe("clientBehindProxy, pure", () => {
  const h = (o: Record<string, string>) => new Headers(o);
  test("only a loopback peer's headers matter", () => {
    expect(clientBehindProxy("10.0.0.5", h({ "x-forwarded-for": "127.0.0.1" }), ["127.0.0.1"])).toEqual({ address: "10.0.0.5" });
    expect(clientBehindProxy("127.0.0.1", h({}), [])).toEqual({ address: "127.0.0.1" });
  });
  test("the last hop of each header, in the forms proxies write it", () => {
    const trusted = ["127.0.0.1"];
    expect(clientBehindProxy("127.0.0.1", h({ forwarded: 'for=192.0.2.60;proto=http, for="[::1]:4711"' }), trusted)).toEqual({ address: "::1" });
    expect(clientBehindProxy("127.0.0.1", h({ forwarded: "for=127.0.0.1:5555" }), trusted)).toEqual({ address: "127.0.0.1" });
    expect(clientBehindProxy("127.0.0.1", h({ forwarded: "for=unknown" }), trusted)).toEqual({ address: "unknown", proxied: "Forwarded" });
    expect(clientBehindProxy("127.0.0.1", h({ forwarded: "proto=https" }), trusted)).toEqual({ address: undefined, proxied: "Forwarded" });
    expect(clientBehindProxy("127.0.0.1", h({ "x-forwarded-for": "" }), trusted)).toEqual({ address: undefined, proxied: "X-Forwarded-For" });
  });
  test("TRUSTED_PROXIES is compared in one spelling", () => {
    expect(parseTrustedProxies("[::1], 127.0.0.1,,")).toEqual(["::1", "127.0.0.1"]);
    expect(parseTrustedProxies("")).toEqual([]);
    expect(canonicalIp("::FFFF:7f00:1")).toBe("127.0.0.1");
    expect(canonicalIp("0:0:0:0:0:0:0:1%lo")).toBe("::1");
  });
});

test("TRUSTED_PROXIES takes loopback addresses only: a proxy on another machine cannot vouch for a loopback client", () => {
  const def = SETTINGS.find((d) => d.key === "TRUSTED_PROXIES")!;
  for (const ok of ["", "127.0.0.1", "127.0.0.1, ::1", "[::1]"]) expect(parseSetting(def, ok).ok).toBe(true);
  for (const bad of ["10.0.0.2", "127.0.0.1,192.168.1.1", "localhost", "*"]) {
    expect(parseSetting(def, bad)).toEqual({ ok: false, message: "expected comma-separated loopback addresses (127.x.x.x or ::1) of proxies on this machine" });
  }
});
