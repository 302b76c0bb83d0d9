/**
 * The upstream of scenario 8 (issue 22): a plain Bun.serve answering `GET /api/tags` with a
 * fixed 1.4 kB JSON from memory, so the proxies' own cost is all that differs between subjects
 * (the simulators in src/sim keep call logs and state; this keeps nothing). `/api/version` for
 * the turnstile's health probe; 404 otherwise. Env: PORT.
 */
const models = Array.from({ length: 5 }, (_, i) => ({
  name: `model-${i}:latest`,
  model: `model-${i}:latest`,
  modified_at: "2026-11-30T10:00:00.000000000Z",
  size: 4_000_000_000 + i,
  digest: `${i}`.repeat(64),
  details: { format: "gguf", family: "llama", parameter_size: "8B", quantization_level: "Q4_K_M" },
}));
/** 1,457 bytes, close to a real /api/tags with five models. */
const TAGS = JSON.stringify({ models });
const JSON_TYPE = { "content-type": "application/json; charset=utf-8" };

Bun.serve({
  hostname: "127.0.0.1",
  port: Number(process.env.PORT),
  idleTimeout: 0,
  fetch(req) {
    const path = req.url.slice(req.url.indexOf("/", 8));
    if (path === "/api/tags") return new Response(TAGS, { headers: JSON_TYPE });
    if (path === "/api/version") return new Response('{"version":"0.12.0"}', { headers: JSON_TYPE });
    return new Response('{"error":"not found"}', { status: 404, headers: JSON_TYPE });
  },
});
