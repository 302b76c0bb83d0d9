/**
 * Who a relayed request is from (fair/forwarded.ts): the rightmost hop not itself a trusted proxy,
 * every forwarding header agreeing; anything else, and any untrusted peer, goes by the peer.
 */
import { describe, expect, test } from "bun:test";
import { clientAddress, formatIp, forwardingHeaders, isTrustedProxy, parseTrustedProxies, relayedClient, type TrustedProxies } from "../../src/fair/forwarded.ts";
import { parseIp } from "../../src/fair/identity.ts";
import { fairSetup } from "../../src/fair/setup.ts";

const h = (o: Record<string, string>) => new Headers(o);

function proxies(text: string): TrustedProxies {
  const p = parseTrustedProxies(text);
  if (!p.ok) throw new Error(p.message);
  return p.proxies;
}

const BALANCER = proxies("192.168.1.5");

describe("parseTrustedProxies", () => {
  test("addresses and ranges, IPv4 and IPv6, bracketed or not; empty = none", () => {
    const p = proxies(" 127.0.0.1 , 192.168.1.5, 10.0.0.0/24, [::1], fd00::/8,,");
    expect(p).toHaveLength(5);
    expect(proxies("")).toEqual([]);
    for (const [addr, trusted] of [
      ["127.0.0.1", true],
      ["::ffff:127.0.0.1", true],
      ["127.0.0.2", false],
      ["10.0.0.200", true],
      ["10.0.1.1", false],
      ["::1", true],
      ["fd12::5", true],
      ["192.168.1.5", true],
      ["::ffff:192.168.1.5", true],
      ["192.168.1.6", false],
    ] as const) {
      expect({ addr, trusted: isTrustedProxy(addr, p) }).toEqual({ addr, trusted });
    }
    expect(isTrustedProxy(undefined, p)).toBe(false);
  });
  test("a bad entry is named", () => {
    expect(parseTrustedProxies("127.0.0.1, 300.1.1.1")).toEqual({ ok: false, message: '"300.1.1.1" is not an address or range (e.g. 127.0.0.1, 192.168.1.5, 10.0.0.0/24, ::1)' });
    expect(parseTrustedProxies("10.0.0.0/33").ok).toBe(false);
    expect(parseTrustedProxies("localhost").ok).toBe(false);
  });
});

describe("relayedClient", () => {
  test("X-Forwarded-For: the rightmost address that is not a trusted proxy, never the leftmost the client wrote", () => {
    // The client wrote "6.6.6.6"; the balancer appended the address it saw.
    expect(relayedClient(h({ "x-forwarded-for": "6.6.6.6, 10.0.0.9" }), BALANCER)).toEqual({ ok: true, client: "10.0.0.9", local: false });
    // Two balancers, both trusted: the first one's client.
    expect(relayedClient(h({ "x-forwarded-for": "6.6.6.6, 10.0.0.9, 192.168.1.5" }), BALANCER)).toEqual({ ok: true, client: "10.0.0.9", local: false });
    // Every hop a trusted proxy: the leftmost (a client on the first proxy's own machine).
    expect(relayedClient(h({ "x-forwarded-for": "192.168.1.5" }), BALANCER)).toEqual({ ok: true, client: "192.168.1.5", local: false });
    expect(relayedClient(h({ "x-forwarded-for": "127.0.0.1" }), proxies("127.0.0.1"))).toEqual({ ok: true, client: "127.0.0.1", local: true });
  });

  test("the forms proxies write an address in, named in one spelling", () => {
    for (const [value, client] of [
      ["10.0.0.9:51234", "10.0.0.9"],
      ["2001:DB8::1", "2001:db8::1"],
      ["[2001:db8::1]:443", "2001:db8::1"],
      ["[2001:db8::1]", "2001:db8::1"],
      ["::ffff:10.0.0.9", "10.0.0.9"],
      ["010.000.000.009", "10.0.0.9"],
    ] as const) {
      expect(relayedClient(h({ "x-forwarded-for": value }), BALANCER)).toEqual({ ok: true, client, local: false });
    }
  });

  test("Forwarded (RFC 7239): each element's for=, quoted or not, with other parameters and quoted commas", () => {
    expect(relayedClient(h({ forwarded: 'for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https;by=192.168.1.5' }), BALANCER)).toEqual({ ok: true, client: "2001:db8:cafe::17", local: false });
    expect(relayedClient(h({ forwarded: 'For=10.0.0.9;host="a,b;c"' }), BALANCER)).toEqual({ ok: true, client: "10.0.0.9", local: false });
    expect(relayedClient(h({ forwarded: "for=10.0.0.9, for=192.168.1.5" }), BALANCER)).toEqual({ ok: true, client: "10.0.0.9", local: false });
  });

  test("malformed or unknown where the client must be read: nothing is believed", () => {
    for (const headers of <Record<string, string>[]>[
      { "x-forwarded-for": "" },
      { "x-forwarded-for": "10.0.0.9," },
      { "x-forwarded-for": "evil.example" },
      { "x-forwarded-for": "10.0.0.9 10.0.0.8" },
      { forwarded: "for=unknown" },
      { forwarded: 'for="_hidden"' },
      { forwarded: "proto=https" },
      { forwarded: "for=10.0.0.9;for=10.0.0.8" },
      { "x-real-ip": "300.0.0.1" },
    ]) {
      expect({ headers, r: relayedClient(h(headers), BALANCER) }).toEqual({ headers, r: { ok: false } });
    }
    // Junk left of the client is the client's own business.
    expect(relayedClient(h({ "x-forwarded-for": "junk, 10.0.0.9" }), BALANCER)).toEqual({ ok: true, client: "10.0.0.9", local: false });
    expect(relayedClient(h({}), BALANCER)).toBeUndefined();
  });

  test("every header present must name the same client: a header the proxy passed through from the client does not outvote the one it wrote", () => {
    expect(relayedClient(h({ "x-forwarded-for": "10.0.0.9", forwarded: "for=10.0.0.7" }), BALANCER)).toEqual({ ok: false });
    expect(relayedClient(h({ "x-forwarded-for": "10.0.0.9", "x-real-ip": "10.0.0.7" }), BALANCER)).toEqual({ ok: false });
    expect(relayedClient(h({ "x-forwarded-for": "6.6.6.6, 10.0.0.9", "x-real-ip": "10.0.0.9" }), BALANCER)).toEqual({ ok: true, client: "10.0.0.9", local: false });
  });

  test("local only when the client and every trusted hop skipped are loopback", () => {
    const both = proxies("127.0.0.1, 192.168.1.5");
    // A process on the balancer's machine: 127.0.0.1 there is not this machine.
    expect(relayedClient(h({ "x-forwarded-for": "127.0.0.1, 192.168.1.5" }), both)).toEqual({ ok: true, client: "127.0.0.1", local: false });
    // HAProxy and nginx both on this machine, relaying a LAN client.
    expect(relayedClient(h({ "x-forwarded-for": "10.0.0.9, 127.0.0.1" }), both)).toEqual({ ok: true, client: "10.0.0.9", local: false });
    expect(relayedClient(h({ "x-forwarded-for": "127.0.0.1, 127.0.0.1" }), both)).toEqual({ ok: true, client: "127.0.0.1", local: true });
  });
});

describe("clientAddress (what identity goes by)", () => {
  test("a trusted peer's forwarded client; an untrusted peer's headers are never believed", () => {
    const headers = h({ "x-forwarded-for": "10.0.0.9" });
    expect(clientAddress("192.168.1.5", headers, BALANCER)).toBe("10.0.0.9");
    expect(clientAddress("::ffff:192.168.1.5", headers, BALANCER)).toBe("10.0.0.9");
    // A spoofed X-Forwarded-For from a client that is not a trusted proxy changes nothing.
    expect(clientAddress("10.0.0.66", headers, BALANCER)).toBe("10.0.0.66");
    expect(clientAddress("192.168.1.5", headers, [])).toBe("192.168.1.5");
    // Malformed, absent or disagreeing: the peer.
    expect(clientAddress("192.168.1.5", h({ "x-forwarded-for": "nonsense" }), BALANCER)).toBe("192.168.1.5");
    expect(clientAddress("192.168.1.5", h({}), BALANCER)).toBe("192.168.1.5");
    expect(clientAddress("192.168.1.5", undefined, BALANCER)).toBe("192.168.1.5");
    expect(clientAddress(undefined, headers, BALANCER)).toBeUndefined();
  });
});

test("forwardingHeaders names what a request carries", () => {
  expect(forwardingHeaders(h({ "x-real-ip": "1.2.3.4", forwarded: "for=1.2.3.4" }))).toEqual(["Forwarded", "X-Real-IP"]);
  expect(forwardingHeaders(h({}))).toEqual([]);
});

test("formatIp: RFC 5952's spelling", () => {
  const f = (s: string) => formatIp(parseIp(s)!);
  expect(f("2001:0db8:0000:0000:0000:0000:0000:0001")).toBe("2001:db8::1");
  expect(f("2001:db8:0:1:0:0:0:1")).toBe("2001:db8:0:1::1");
  expect(f("::1")).toBe("::1");
  expect(f("::")).toBe("::");
  expect(f("fe80::")).toBe("fe80::");
  expect(f("1:0:2:3:4:5:6:7")).toBe("1:0:2:3:4:5:6:7");
  expect(f("::ffff:7f00:1")).toBe("127.0.0.1");
});

describe("fairSetup with TRUSTED_PROXIES", () => {
  const base = { fairClasses: "interactive:4,normal:2,batch:1", fairChatsFirst: "batch", clientsFile: "/etc/clients" };
  test("behind a trusted balancer, clients are told apart by the address it forwards, and CLIENTS_FILE's cidr= rules match it", () => {
    const s = fairSetup({ ...base, trustedProxies: "192.168.1.5" }, "lab interactive cidr=10.0.0.0/24\n");
    if (!s.ok) throw new Error(s.message);
    const via = (xff: string, peer = "192.168.1.5") => s.fair.identify({ address: peer, headers: h({ "x-forwarded-for": xff }) });
    expect(via("10.0.0.9")).toMatchObject({ client: "lab", cls: "interactive", by: "address", known: true });
    expect(via("172.16.0.4").client).toBe("172.16.0.4");
    expect(via("172.16.0.5").client).toBe("172.16.0.5");
    // The same X-Forwarded-For sent straight from a client that is no trusted proxy: the peer.
    expect(via("10.0.0.9", "172.16.0.4")).toMatchObject({ client: "172.16.0.4", known: false });
    // Without TRUSTED_PROXIES, as before: the balancer is the one client.
    const none = fairSetup(base, undefined);
    expect(none.ok && none.fair.identify({ address: "192.168.1.5", headers: h({ "x-forwarded-for": "172.16.0.4" }) }).client).toBe("192.168.1.5");
  });
  test("a bad TRUSTED_PROXIES stops the start naming the setting", () => {
    expect(fairSetup({ ...base, trustedProxies: "10.0.0.0/40" }, undefined)).toEqual({
      ok: false,
      message: 'TRUSTED_PROXIES: "10.0.0.0/40" is not an address or range (e.g. 127.0.0.1, 192.168.1.5, 10.0.0.0/24, ::1)',
    });
  });
});
