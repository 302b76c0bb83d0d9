import { describe, expect, test } from "bun:test";
import { authorise, crossSiteRequest, forbidden } from "../../src/status/auth.ts";
import { isLoopback } from "../../src/fair/forwarded.ts";

const TOKEN = "s3cret-admin-token-0123";

describe("isLoopback", () => {
  test.each(["127.0.0.1", "127.0.0.2", "127.255.255.254", "127.1.2.3", "::1", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1", "::FFFF:127.9.8.7", "::ffff:7f00:1", "::1%lo"])(
    "%s is loopback",
    (a) => expect(isLoopback(a)).toBe(true),
  );
  test.each(["10.0.0.1", "192.168.1.20", "128.0.0.1", "1.127.0.0", "127.0.0", "127.0.0.1.5", "127.0.0.256", "::2", "::ffff:10.0.0.1", "::ffff:8000:1", "fe80::1", "", "localhost"])(
    "%s is not loopback",
    (a) => expect(isLoopback(a)).toBe(false),
  );
});

describe("authorise", () => {
  test("loopback without a token is allowed, with or without ADMIN_TOKEN", () => {
    expect(authorise("127.0.0.1", null, "")).toEqual({ ok: true, via: "loopback" });
    expect(authorise("127.3.4.5", null, TOKEN)).toEqual({ ok: true, via: "loopback" });
    expect(authorise("::ffff:127.0.0.1", null, TOKEN)).toEqual({ ok: true, via: "loopback" });
  });
  test("another address without a token is refused and told how to get in", () => {
    const none = authorise("192.168.1.20", null, "");
    expect(none).toMatchObject({ ok: false, reason: expect.stringContaining("ADMIN_TOKEN") });
    expect(authorise("192.168.1.20", null, TOKEN)).toMatchObject({ ok: false, reason: expect.stringContaining("Bearer") });
    expect(authorise(undefined, null, TOKEN).ok).toBe(false);
  });
  test("the right token is allowed from anywhere; the scheme is case-insensitive", () => {
    expect(authorise("192.168.1.20", `Bearer ${TOKEN}`, TOKEN)).toEqual({ ok: true, via: "token" });
    expect(authorise("203.0.113.9", `bearer ${TOKEN}`, TOKEN)).toEqual({ ok: true, via: "token" });
  });
  test("a wrong token is refused, from loopback too", () => {
    expect(authorise("127.0.0.1", `Bearer ${TOKEN}x`, TOKEN)).toEqual({ ok: false, reason: "wrong admin token" });
    expect(authorise("::1", "Bearer nope", TOKEN).ok).toBe(false);
    expect(authorise("192.168.1.20", "Bearer nope", TOKEN).ok).toBe(false);
  });
  test("a token when none is configured is refused rather than ignored", () => {
    expect(authorise("127.0.0.1", "Bearer anything", "")).toMatchObject({ ok: false, reason: expect.stringContaining("no ADMIN_TOKEN") });
  });
  test("another scheme is not a token: judged by address", () => {
    expect(authorise("127.0.0.1", "Basic dXNlcjpwYXNz", TOKEN).ok).toBe(true);
    expect(authorise("10.0.0.1", `Basic ${TOKEN}`, TOKEN).ok).toBe(false);
  });
  test("a refusal is a JSON 403", async () => {
    const res = forbidden({ reason: "wrong admin token" });
    expect(res.status).toBe(403);
    expect(res.headers.get("content-type")).toContain("application/json");
    expect(await res.json()).toEqual({ error: "gpu-turnstile: forbidden: wrong admin token" });
  });
});

describe("crossSiteRequest", () => {
  test.each([
    [null, "127.0.0.1:11434", null, true],
    ["http://127.0.0.1:11434", "127.0.0.1:11434", "same-origin", true],
    ["http://LOCALHOST:11434", "localhost:11434", null, true],
    ["http://evil.example", "127.0.0.1:11434", null, false],
    ["http://127.0.0.1:8188", "127.0.0.1:11434", null, false],
    ["null", "127.0.0.1:11434", null, false],
    [null, "127.0.0.1:11434", "cross-site", false],
    ["http://127.0.0.1:11434", "127.0.0.1:11434", "same-site", false],
  ] as [string | null, string, string | null, boolean][])("Origin %p, Host %p, Sec-Fetch-Site %p → allowed %p", (origin, host, site, ok) => {
    expect(crossSiteRequest(origin, host, site).ok).toBe(ok);
  });
});
