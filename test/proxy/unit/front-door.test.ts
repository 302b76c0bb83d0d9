import { describe, expect, test } from "bun:test";
import { admit, requestPath } from "../../../src/proxy/front-door.ts";

const anyHost = () => true;
const onlyLocalhost = (h: string) => h.startsWith("localhost");

/** A request the way Bun hands it over: `url` as Bun writes it (relative when the Host was unusable). */
function req(url: string, headers: Record<string, string> = {}, method = "GET"): Request {
  const r = new Request(`http://placeholder${requestPath(url)}`, { method, headers, body: method === "POST" ? "abcde" : undefined });
  // new Request() refuses such URLs itself: present the one Bun gives.
  return new Proxy(r, { get: (t, k) => (k === "url" ? url : Reflect.get(t, k, t)) });
}

describe("Host", () => {
  test("a usable Host that may pass: admitted with its URL and routed path", () => {
    const a = admit(req("http://localhost:11434/api/%63hat?x=1", { host: "localhost:11434" }), anyHost);
    expect(a.ok && { path: a.url.pathname, search: a.url.search, routed: a.routed }).toEqual({ path: "/api/%63hat", search: "?x=1", routed: "/api/chat" });
  });

  test("a Host seen before: path and query are those of the URL parser, every time (the second is cut from the string)", () => {
    const target = (url: string, host: string) => {
      const a = admit(req(url, { host }), anyHost);
      return a.ok ? [a.url.pathname, a.url.search] : a.reply.status;
    };
    for (let i = 0; i < 2; i++) {
      expect(target("http://repeat.test:1/api/tags?x=1#frag", "repeat.test:1")).toEqual(["/api/tags", "?x=1"]);
      expect(target("http://repeat.test:1/a#b?c", "repeat.test:1")).toEqual(["/a", ""]);
      expect(target("http://repeat.test:1/a?", "repeat.test:1")).toEqual(["/a", ""]);
      expect(target("http://[::1]:2/v1/x?y=%20", "[::1]:2")).toEqual(["/v1/x", "?y=%20"]);
      // The URL parser refuses an IPv4 address with an octet over 255: refused again, never remembered.
      expect(target("http://1.2.3.999/api/tags", "1.2.3.999")).toBe(400);
    }
  });

  test.each([
    ["no Host (HTTP/1.0)", "/api/tags", {}, "has no Host header"],
    ["an empty Host", "/api/tags", { host: "" }, "has no Host header"],
    ["Host: a b", "/api/tags", { host: "a b" }, 'the Host header "a b" is not a valid host[:port]'],
    ["Host: [zz]", "http://[zz]/api/tags", { host: "[zz]" }, 'the Host header "[zz]" is not a valid'],
    ["Host: x:99999", "http://x:99999/api/tags", { host: "x:99999" }, 'the Host header "x:99999" is not a valid'],
    ["two Host fields", "http://x/api/tags", { host: "x, y" }, "more than one Host header"],
  ])("%s: 400, and never a throw", (_what, url, headers, message) => {
    const a = admit(req(url, headers), anyHost);
    expect(a.ok).toBe(false);
    if (a.ok) return;
    expect(a.reply.status).toBe(400);
    expect(a.reply.message).toContain(message);
  });

  test("a Host the guard refuses: 403 naming the Host and ALLOWED_HOSTS", () => {
    const a = admit(req("http://evil.example:11434/api/tags", { host: "evil.example:11434" }), onlyLocalhost);
    expect(a.ok).toBe(false);
    if (a.ok) return;
    expect(a.reply.status).toBe(403);
    expect(a.reply.message).toContain('"evil.example:11434"');
    expect(a.reply.message).toContain("ALLOWED_HOSTS");
  });
});

describe("path encoding", () => {
  test.each(["/api/%zzhat", "/api/chat%00", "/api/chat%"])("%s: 400", (path) => {
    const a = admit(req(`http://localhost${path}`, { host: "localhost" }), anyHost);
    expect(a.ok).toBe(false);
    if (!a.ok) expect(a.reply).toMatchObject({ status: 400, type: "invalid_request" });
  });
});

describe("Content-Length", () => {
  test("repeated equal values (Bun folds them into `5, 5`) become one", () => {
    const r = req("http://localhost/api/chat", { host: "localhost", "content-length": "5, 5" }, "POST");
    expect(admit(r, anyHost).ok).toBe(true);
    expect(r.headers.get("content-length")).toBe("5");
  });

  test("differing values: 400 (RFC 9110 §8.6)", () => {
    const r = req("http://localhost/api/chat", { host: "localhost", "content-length": "5, 6" }, "POST");
    const a = admit(r, anyHost);
    expect(a.ok).toBe(false);
    if (!a.ok) expect(a.reply).toMatchObject({ status: 400, message: expect.stringContaining("conflicting Content-Length") });
  });

  test("a single value is left alone", () => {
    const r = req("http://localhost/api/chat", { host: "localhost", "content-length": "5" }, "POST");
    expect(admit(r, anyHost).ok).toBe(true);
    expect(r.headers.get("content-length")).toBe("5");
  });
});

test.each([
  ["http://x/healthz", "/healthz"],
  ["http://x/healthz?a=b", "/healthz"],
  ["http://x", "/"],
  ["/healthz", "/healthz"],
  ["/metrics?x", "/metrics"],
  ["http://[zz]/healthz", "/healthz"],
])("requestPath(%p) is %p", (url, path) => {
  expect(requestPath(url)).toBe(path);
});
