import { describe, expect, test } from "bun:test";
import { clientResponseHeaders, stripHopByHop, upstreamRequestHeaders } from "../../src/upstream/headers.ts";

const HOP = [
  "connection",
  "proxy-connection",
  "keep-alive",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
];

function names(h: Headers): string[] {
  return [...h.keys()].sort();
}

describe("stripHopByHop", () => {
  test("removes every fixed hop-by-hop field and keeps end-to-end ones", () => {
    const h = new Headers({ "content-type": "application/json", authorization: "Bearer t", "x-request-id": "1" });
    for (const n of HOP) h.set(n, n === "connection" ? "close" : "v");
    stripHopByHop(h);
    expect(names(h)).toEqual(["authorization", "content-type", "x-request-id"]);
  });

  test("removes fields named in Connection, whatever their case and spacing", () => {
    const h = new Headers({
      connection: " X-Trace ,keep-alive,,  x-SECRET\t",
      "x-trace": "1",
      "x-secret": "2",
      "x-kept": "3",
    });
    stripHopByHop(h);
    expect(names(h)).toEqual(["x-kept"]);
  });

  test("handles several Connection header lines", () => {
    const h = new Headers([
      ["connection", "x-a"],
      ["connection", "x-b"],
      ["x-a", "1"],
      ["x-b", "2"],
      ["x-c", "3"],
    ]);
    stripHopByHop(h);
    expect(names(h)).toEqual(["x-c"]);
  });

  test("a Connection option that is not a field name is ignored instead of failing the request", () => {
    const h = new Headers({ connection: "close, not a token, x-a, @", "x-a": "1", "x-b": "2" });
    expect(() => stripHopByHop(h)).not.toThrow();
    expect(names(h)).toEqual(["x-b"]);
  });

  test("clientResponseHeaders strips a copy and leaves the upstream's headers alone", () => {
    const up = new Headers({ "transfer-encoding": "chunked", connection: "x-hop", "x-hop": "1", "content-type": "text/plain" });
    const out = clientResponseHeaders(up);
    expect(names(out)).toEqual(["content-type"]);
    expect(up.get("x-hop")).toBe("1");
  });
});

describe("upstreamRequestHeaders", () => {
  const upstream = new URL("http://127.0.0.1:8188");
  const info = { clientIp: "10.0.0.7", proto: "http" };

  test("Host becomes the upstream's authority; the client's Host moves to X-Forwarded-Host", () => {
    const h = upstreamRequestHeaders(new Headers({ host: "gpu-box:8188" }), upstream, info);
    expect(h.get("host")).toBe("127.0.0.1:8188");
    expect(h.get("x-forwarded-host")).toBe("gpu-box:8188");
    expect(h.get("x-forwarded-proto")).toBe("http");
  });

  test("Host keeps a non-default upstream port and drops a default one", () => {
    const a = upstreamRequestHeaders(new Headers({ host: "x" }), new URL("http://localhost:11434/base/"), info);
    expect(a.get("host")).toBe("localhost:11434");
    const b = upstreamRequestHeaders(new Headers({ host: "x" }), new URL("http://[::1]:80"), info);
    expect(b.get("host")).toBe("[::1]");
  });

  test("an Origin equal to the client's Host (the UI loaded through the turnstile) becomes the upstream's origin", () => {
    const h = upstreamRequestHeaders(new Headers({ host: "GPU-Box:8188", origin: "http://gpu-box:8188" }), upstream, info);
    expect(h.get("origin")).toBe("http://127.0.0.1:8188");
  });

  test.each([
    ["another site", "http://evil.example"],
    ["same host, other port", "http://gpu-box:9999"],
    ["opaque origin", "null"],
  ])("a foreign Origin (%s) is kept so ComfyUI's CSRF guard still sees it", (_name, origin) => {
    const h = upstreamRequestHeaders(new Headers({ host: "gpu-box:8188", origin }), upstream, info);
    expect(h.get("origin")).toBe(origin);
  });

  test("no Origin stays no Origin", () => {
    const h = upstreamRequestHeaders(new Headers({ host: "gpu-box:8188" }), upstream, info);
    expect(h.has("origin")).toBe(false);
  });

  test("X-Forwarded-For gets the client appended to what earlier proxies wrote", () => {
    const first = upstreamRequestHeaders(new Headers({ host: "h" }), upstream, info);
    expect(first.get("x-forwarded-for")).toBe("10.0.0.7");
    const chained = upstreamRequestHeaders(new Headers({ host: "h", "x-forwarded-for": "1.2.3.4, 5.6.7.8" }), upstream, info);
    expect(chained.get("x-forwarded-for")).toBe("1.2.3.4, 5.6.7.8, 10.0.0.7");
  });

  test("without a known client address, an existing X-Forwarded-For is passed unchanged", () => {
    const h = upstreamRequestHeaders(new Headers({ host: "h", "x-forwarded-for": "1.2.3.4" }), upstream, { clientIp: undefined, proto: "http" });
    expect(h.get("x-forwarded-for")).toBe("1.2.3.4");
  });

  test("X-Forwarded-Proto and -Host set by an earlier proxy are preserved", () => {
    const h = upstreamRequestHeaders(
      new Headers({ host: "internal:8188", "x-forwarded-proto": "https", "x-forwarded-host": "comfy.example.com" }),
      upstream,
      info,
    );
    expect(h.get("x-forwarded-proto")).toBe("https");
    expect(h.get("x-forwarded-host")).toBe("comfy.example.com");
  });

  test("hop-by-hop fields are not sent upstream, end-to-end ones are, and the incoming headers are untouched", () => {
    const incoming = new Headers({
      host: "h",
      connection: "keep-alive, x-hop",
      "x-hop": "1",
      "keep-alive": "timeout=5",
      te: "trailers",
      "content-type": "application/json",
      "accept-encoding": "gzip",
    });
    const h = upstreamRequestHeaders(incoming, upstream, info);
    for (const n of ["connection", "x-hop", "keep-alive", "te"]) expect(h.has(n)).toBe(false);
    expect(h.get("content-type")).toBe("application/json");
    expect(h.get("accept-encoding")).toBe("gzip");
    expect(incoming.get("x-hop")).toBe("1");
    expect(incoming.get("host")).toBe("h");
  });
});
