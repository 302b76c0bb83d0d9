/**
 * Pass-through: what a client gets through the turnstile is what it would get from the upstream
 * directly — status, end-to-end headers and the exact body bytes — and what the upstream receives
 * is what the client sent (method, path, query, body).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { gunzipSync, gzipSync } from "node:zlib";
import { rawFetch, type RawInit, seen, type Stack, startStack } from "./helpers.ts";

let s: Stack;
beforeAll(async () => {
  s = await startStack();
});
afterAll(async () => {
  await s.stop();
});

/** The same request straight to the upstream and through the turnstile; both answers must match. */
async function expectSameAsDirect(upstream: string, via: string, path: string, init: RawInit = {}): Promise<Uint8Array> {
  const directRes = await rawFetch(`${upstream}${path}`, init);
  const direct = await seen(directRes);
  const proxiedRes = await rawFetch(`${via}${path}`, init);
  const chunked = proxiedRes.headers.get("transfer-encoding") === "chunked";
  const proxied = await seen(proxiedRes);
  // Content-Length is framing. Bun.serve drops it from any body still streaming when the response
  // starts and frames it chunked instead (oven-sh/bun#10507); the body length must still agree.
  const length = direct.headers.find(([k]) => k === "content-length");
  if (length && chunked && !proxied.headers.some(([k]) => k === "content-length")) {
    expect(proxied.body.length).toBe(Number(length[1]));
    direct.headers = direct.headers.filter(([k]) => k !== "content-length");
  }
  expect({ path, status: proxied.status, headers: proxied.headers }).toEqual({ path, status: direct.status, headers: direct.headers });
  expect(proxied.body.length).toBe(direct.body.length);
  expect(Buffer.from(proxied.body).equals(Buffer.from(direct.body))).toBe(true);
  return proxied.body;
}

describe("pass-through is byte-identical to a direct request", () => {
  test("Ollama: /api/tags, /api/show, /v1/models and a 404", async () => {
    const { ollama } = s.pair;
    const via = s.t.ollamaUrl;
    const tags = await expectSameAsDirect(ollama.url, via, "/api/tags");
    expect(JSON.parse(new TextDecoder().decode(tags)).models.length).toBeGreaterThan(0);
    const show = { method: "POST", body: JSON.stringify({ model: "llama3.2" }), headers: { "content-type": "application/json" } };
    await expectSameAsDirect(ollama.url, via, "/api/show", show);
    await expectSameAsDirect(ollama.url, via, "/v1/models");
    const nope = await expectSameAsDirect(ollama.url, via, "/nope");
    expect(new TextDecoder().decode(nope)).toBe("404 page not found");
  });

  test("ComfyUI: a binary /view, /history, /object_info", async () => {
    const { comfy } = s.pair;
    const via = s.t.comfyUrl;
    const png = await expectSameAsDirect(comfy.url, via, "/view?filename=big.png&type=output");
    expect(png.length).toBe(8 * 1024 * 1024);
    expect([...png.subarray(0, 4)]).toEqual([0x89, 0x50, 0x4e, 0x47]);
    await expectSameAsDirect(comfy.url, via, "/history");
    await expectSameAsDirect(comfy.url, via, "/object_info");
    await expectSameAsDirect(comfy.url, via, "/api/object_info/KSampler");
  });

  test("method, path, query string and body reach the upstream unchanged", async () => {
    const { ollama, comfy } = s.pair;
    comfy.clearCalls();
    const query = "max_items=1&offset=0&x=%2Fa%20b&x=2&empty=";
    await (await fetch(`${s.t.comfyUrl}/history?${query}`)).arrayBuffer();
    const call = comfy.calls.find((c) => c.path === "/history");
    expect(call).toMatchObject({ method: "GET", path: "/history", query });

    ollama.clearCalls();
    const body = JSON.stringify({ model: "llama3.2", verbose: false, note: "ünïcödé ✓" });
    await (await fetch(`${s.t.ollamaUrl}/api/show?q=1`, { method: "POST", body, headers: { "x-custom": "kept" } })).arrayBuffer();
    const show = ollama.calls.find((c) => c.path === "/api/show");
    expect(show).toMatchObject({ method: "POST", query: "q=1", bodyText: body });
    expect(show?.headers["x-custom"]).toBe("kept");
    expect(show?.headers["x-forwarded-proto"]).toBe("http");
    expect(show?.headers["x-forwarded-for"]).toBe("127.0.0.1");
  });

  test("a 3 MiB upload (above RETRY_BODY_LIMIT, so streamed) arrives intact", async () => {
    const bytes = new Uint8Array(3 * 1024 * 1024).map((_, i) => (i * 7 + (i >> 12)) & 0xff);
    const form = new FormData();
    form.append("image", new File([bytes], "e2e-upload.png", { type: "image/png" }));
    form.append("overwrite", "true");
    const res = await fetch(`${s.t.comfyUrl}/upload/image`, { method: "POST", body: form });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ name: "e2e-upload.png", subfolder: "", type: "input" });
    // Read back straight from ComfyUI: what it stored is what the client sent.
    const stored = new Uint8Array(await (await fetch(`${s.pair.comfy.url}/view?filename=e2e-upload.png&type=input`)).arrayBuffer());
    expect(stored.length).toBe(bytes.length);
    expect(Buffer.from(stored).equals(Buffer.from(bytes))).toBe(true);
  });

  test("HEAD: same status and headers, no body", async () => {
    const { ollama, comfy } = s.pair;
    const tags = await expectSameAsDirect(ollama.url, s.t.ollamaUrl, "/api/tags", { method: "HEAD" });
    expect(tags.length).toBe(0);
    ollama.clearCalls();
    const res = await rawFetch(`${s.t.ollamaUrl}/api/tags`, { method: "HEAD" });
    // The length of the body a GET would have had is kept (a client may size a download by it).
    expect(Number(res.headers.get("content-length"))).toBeGreaterThan(0);
    expect(ollama.calls.map((c) => c.method)).toEqual(["HEAD"]);
    await expectSameAsDirect(comfy.url, s.t.comfyUrl, "/system_stats", { method: "HEAD" });
  });

  test("a gzip-encoded answer passes through still compressed, same bytes", async () => {
    const { ollama } = s.pair;
    const plain = JSON.stringify({ models: Array.from({ length: 200 }, (_, i) => ({ name: `model-${i}:latest` })) });
    const gz = gzipSync(plain);
    const remove = ollama.override("GET", "/api/tags", () =>
      new Response(gz, { headers: { "content-type": "application/json; charset=utf-8", "content-encoding": "gzip", vary: "Accept-Encoding" } }),
    );
    try {
      const init = { headers: { "accept-encoding": "gzip" } };
      const body = await expectSameAsDirect(ollama.url, s.t.ollamaUrl, "/api/tags", init);
      const res = await rawFetch(`${s.t.ollamaUrl}/api/tags`, init);
      expect(res.headers.get("content-encoding")).toBe("gzip");
      await res.arrayBuffer();
      expect(Buffer.from(body).equals(gz)).toBe(true);
      expect(gunzipSync(body).toString()).toBe(plain);
    } finally {
      remove();
    }
  });

  test("a redirect passes through with its Location untouched and is not followed", async () => {
    const { comfy } = s.pair;
    const remove = comfy.override("GET", "/old", () => new Response(null, { status: 302, headers: { location: "/object_info?from=old" } }));
    try {
      await expectSameAsDirect(comfy.url, s.t.comfyUrl, "/old");
      comfy.clearCalls();
      const res = await rawFetch(`${s.t.comfyUrl}/old`);
      expect(res.status).toBe(302);
      expect(res.headers.get("location")).toBe("/object_info?from=old");
      expect(await res.text()).toBe("");
      // Following it would have cost a second upstream call.
      expect(comfy.calls.map((c) => c.path)).toEqual(["/old"]);
    } finally {
      remove();
    }
  });

  test("bodiless statuses (204, 304) and repeated Set-Cookie headers pass through", async () => {
    const { comfy } = s.pair;
    const removers = [
      comfy.override("GET", "/e2e/304", () => new Response(null, { status: 304, headers: { etag: '"v1"', "cache-control": "max-age=60" } })),
      comfy.override("DELETE", "/e2e/204", () => new Response(null, { status: 204 })),
      comfy.override("GET", "/e2e/cookies", () => {
        const h = new Headers({ "content-type": "text/plain" });
        h.append("set-cookie", "a=1; Path=/");
        h.append("set-cookie", "b=2; Path=/; HttpOnly");
        return new Response("ok", { headers: h });
      }),
    ];
    try {
      await expectSameAsDirect(comfy.url, s.t.comfyUrl, "/e2e/304", { headers: { "if-none-match": '"v1"' } });
      await expectSameAsDirect(comfy.url, s.t.comfyUrl, "/e2e/204", { method: "DELETE" });
      await expectSameAsDirect(comfy.url, s.t.comfyUrl, "/e2e/cookies");
      const res = await rawFetch(`${s.t.comfyUrl}/e2e/cookies`);
      expect(res.headers.getSetCookie()).toEqual(["a=1; Path=/", "b=2; Path=/; HttpOnly"]);
      await res.arrayBuffer();
    } finally {
      for (const r of removers) r();
    }
  });

  test("hop-by-hop headers are stripped both ways, including those named in Connection", async () => {
    const { ollama } = s.pair;
    const remove = ollama.override("GET", "/api/version", () =>
      new Response('{"version":"x"}', { headers: { "content-type": "application/json", connection: "x-hop", "x-hop": "secret", "x-end": "kept" } }),
    );
    try {
      ollama.clearCalls();
      const res = await rawFetch(`${s.t.ollamaUrl}/api/version`, { headers: { connection: "x-client-hop", "x-client-hop": "1", "x-client-end": "2" } });
      expect(res.headers.get("x-hop")).toBeNull();
      expect(res.headers.get("x-end")).toBe("kept");
      expect(await res.text()).toBe('{"version":"x"}');
      const call = ollama.calls.find((c) => c.path === "/api/version");
      expect(call?.headers["x-client-hop"]).toBeUndefined();
      expect(call?.headers["x-client-end"]).toBe("2");
    } finally {
      remove();
    }
  });
});
