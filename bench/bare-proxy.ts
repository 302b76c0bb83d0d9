/**
 * The floor for a Bun proxy: Bun.serve handing each request to fetch and returning the upstream
 * response as it is (no Hono, no classification, no header rewriting beyond Host, no retry, no
 * lock). Run beside the turnstile in the benchmark to separate Bun's own cost from ours.
 * Env: BARE_ROUTES = JSON [{port, upstream}], one listener per route, all in this process.
 */
const routes = JSON.parse(process.env.BARE_ROUTES ?? "[]") as { port: number; upstream: string }[];

type BunInit = RequestInit & { decompress: boolean; duplex: "half" };

for (const r of routes) {
  const upstream = new URL(r.upstream);
  Bun.serve({
    hostname: "127.0.0.1",
    port: r.port,
    idleTimeout: 0,
    fetch(req) {
      const url = new URL(req.url);
      const headers = new Headers(req.headers);
      headers.set("host", upstream.host);
      const init: BunInit = {
        method: req.method,
        headers,
        body: req.body,
        redirect: "manual",
        decompress: false,
        signal: req.signal,
        duplex: "half",
      };
      return fetch(`${upstream.origin}${url.pathname}${url.search}`, init);
    },
  });
}
