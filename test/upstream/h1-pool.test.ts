import { afterEach, describe, expect, test } from "bun:test";
import type { Server, Socket, TCPSocketListener } from "bun";
import { isConnectPhaseError } from "../../src/upstream/upstream-errors.ts";
import { onPooledBodyEnd, poolFor, UpstreamError, type PoolRequest } from "../../src/upstream/h1-pool.ts";

const enc = new TextEncoder();
const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

/** Poll until `cond` holds or the deadline passes (no sleeps standing in for events). */
async function until(cond: () => boolean, ms = 3000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await Bun.sleep(5);
  }
}

function req(over: Partial<PoolRequest> & { target: string }): PoolRequest {
  return { method: "GET", headers: new Headers({ host: "up" }), body: undefined, signal: new AbortController().signal, ...over };
}

/** A real HTTP server (Bun.serve) that counts the TCP connections it was given. */
function httpUpstream(handler: (r: Request) => Response | Promise<Response>): { url: URL; server: Server<undefined>; peers: Set<number> } {
  const peers = new Set<number>();
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch(r, s) {
      peers.add(s.requestIP(r)!.port);
      return handler(r);
    },
  });
  cleanups.push(() => void server.stop(true));
  return { url: new URL(`http://127.0.0.1:${server.port}`), server, peers };
}

/** A TCP server that answers with whatever `script` writes: for upstreams that misbehave. */
function scriptedUpstream(script: (s: Socket<{ got: string }>, request: string, n: number) => void): { url: URL; listener: TCPSocketListener<{ got: string }>; connections: () => number } {
  let connections = 0;
  let n = 0;
  const listener = Bun.listen<{ got: string }>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(s) {
        connections++;
        s.data = { got: "" };
      },
      data(s, d) {
        s.data.got += Buffer.from(d).toString("latin1");
        const end = s.data.got.indexOf("\r\n\r\n");
        if (end < 0) return;
        const request = s.data.got.slice(0, end + 4);
        s.data.got = s.data.got.slice(end + 4);
        script(s, request, ++n);
      },
    },
  });
  cleanups.push(() => listener.stop(true));
  return { url: new URL(`http://127.0.0.1:${listener.port}`), listener, connections: () => connections };
}

describe("pooled HTTP/1.1 client", () => {
  test("sequential requests share one kept-alive connection", async () => {
    const up = httpUpstream(() => Response.json({ ok: true }));
    const pool = poolFor(up.url);
    for (let i = 0; i < 5; i++) {
      const res = await pool.request(req({ target: `/api/tags?i=${i}` }));
      expect(await res.json()).toEqual({ ok: true });
    }
    expect(up.peers.size).toBe(1);
    expect(pool.idleCount).toBeGreaterThanOrEqual(1);
  });

  test("status, reason, repeated fields and the body pass as sent; connection fields do not", async () => {
    const up = scriptedUpstream((s) => {
      s.write("HTTP/1.1 418 I'm a teapot\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nConnection: X-Secret\r\nX-Secret: hop\r\nKeep-Alive: timeout=5\r\nContent-Length: 5\r\n\r\nshort");
    });
    const res = await poolFor(up.url).request(req({ target: "/" }));
    expect(res.status).toBe(418);
    expect(res.statusText).toBe("I'm a teapot");
    expect(res.headers.getSetCookie()).toEqual(["a=1", "b=2"]);
    expect(res.headers.get("x-secret")).toBeNull();
    expect(res.headers.get("keep-alive")).toBeNull();
    expect(res.headers.get("connection")).toBeNull();
    expect(await res.text()).toBe("short");
  });

  test("a streamed answer arrives piece by piece, and its end is reported once", async () => {
    let push!: (s: string) => void;
    let close!: () => void;
    const up = httpUpstream(
      () =>
        new Response(
          new ReadableStream<Uint8Array>({
            start(c) {
              push = (s) => c.enqueue(enc.encode(s));
              close = () => c.close();
              push('{"n":1}\n');
            },
          }),
          { headers: { "content-type": "application/x-ndjson" } },
        ),
    );
    const res = await poolFor(up.url).request(req({ target: "/api/chat", method: "POST", body: enc.encode("{}") }));
    let ends = 0;
    expect(onPooledBodyEnd(res, () => ends++)).toBe(true);
    const reader = res.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe('{"n":1}\n');
    expect(ends).toBe(0);
    push('{"n":2}\n');
    close();
    let rest = "";
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      rest += new TextDecoder().decode(r.value);
    }
    expect(rest).toBe('{"n":2}\n');
    await until(() => ends === 1);
  });

  test("a request body streamed without a length goes upstream chunked and arrives intact", async () => {
    const up = httpUpstream(async (r) => new Response(`${r.headers.get("transfer-encoding")}:${await r.text()}`));
    const parts = ["alpha ", "beta ", "gamma"];
    const body = new ReadableStream<Uint8Array>({
      pull(c) {
        const p = parts.shift();
        if (p === undefined) c.close();
        else c.enqueue(enc.encode(p));
      },
    });
    const res = await poolFor(up.url).request(req({ target: "/upload", method: "POST", body }));
    expect(await res.text()).toBe("chunked:alpha beta gamma");
  });

  test("a 1 MiB answer (too big to collect) streams through byte for byte", async () => {
    const big = new Uint8Array(1024 * 1024).map((_, i) => (i * 7) % 251);
    const up = httpUpstream(() => new Response(big));
    const res = await poolFor(up.url).request(req({ target: "/view" }));
    expect(res.body).not.toBeNull();
    expect(new Uint8Array(await res.arrayBuffer())).toEqual(big);
  });

  test("a body delimited by the connection closing is read to the end", async () => {
    const up = scriptedUpstream((s) => {
      s.write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end");
      s.end();
    });
    const res = await poolFor(up.url).request(req({ target: "/" }));
    expect(await res.text()).toBe("until the end");
  });

  test("an upstream that closes mid-body makes the client's read fail, not end cleanly", async () => {
    const up = scriptedUpstream((s) => {
      s.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\npart\r\n");
      setTimeout(() => s.end(), 20);
    });
    const res = await poolFor(up.url).request(req({ target: "/" }));
    let ended = false;
    onPooledBodyEnd(res, () => (ended = true));
    await expect(res.text()).rejects.toThrow();
    await until(() => ended);
  });

  test("a connection the upstream closed while idle is replaced, and the GET succeeds", async () => {
    const up = scriptedUpstream((s, _r, n) => {
      s.write(`HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n${n}`);
      // Keep-alive promised, then the server drops the connection anyway (a restart, an idle cut).
      if (n === 1) setTimeout(() => s.terminate(), 5);
    });
    const pool = poolFor(up.url);
    expect(await (await pool.request(req({ target: "/" }))).text()).toBe("1");
    await Bun.sleep(30); // let the close happen before the next request; the pool must not hand it out
    expect(await (await pool.request(req({ target: "/" }))).text()).toBe("2");
    expect(up.connections()).toBe(2);
  });

  test("a reused connection that dies before answering is retried once for a GET", async () => {
    const up = scriptedUpstream((s, _r, n) => {
      if (n === 2) return void s.terminate(); // the race: our request met the server's close
      s.write(`HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n${n}`);
    });
    const pool = poolFor(up.url);
    expect(await (await pool.request(req({ target: "/" }))).text()).toBe("1");
    const res = await pool.request(req({ target: "/api/tags" }));
    expect(await res.text()).toBe("3");
  });

  // At most once (Go's net/http rule): a POST that may have reached the upstream is never sent again.
  test("a reused connection that dies after a POST was written is not retried: one POST reaches the upstream", async () => {
    const seen: string[] = [];
    const up = scriptedUpstream((s, request, n) => {
      seen.push(request.slice(0, request.indexOf(" /")));
      // ComfyUI read the /prompt, then went away before answering.
      if (n === 2) return void s.terminate();
      s.write(`HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n${n}`);
    });
    const pool = poolFor(up.url);
    expect(await (await pool.request(req({ target: "/" }))).text()).toBe("1");
    const err = await pool.request(req({ target: "/prompt", method: "POST", body: enc.encode("{}") })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toMatch(/not sent again/);
    // forward() must not take it for a refusal and retry it either.
    expect(isConnectPhaseError(err)).toBe(false);
    expect(seen).toEqual(["GET", "POST"]);
    expect(up.connections()).toBe(1);
  });

  test("a POST marked with Idempotency-Key (or X-Idempotency-Key) is retried like a GET", async () => {
    for (const key of ["Idempotency-Key", "X-Idempotency-Key"]) {
      const up = scriptedUpstream((s, _r, n) => {
        if (n === 2) return void s.terminate();
        s.write(`HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n${n}`);
      });
      const pool = poolFor(up.url);
      expect(await (await pool.request(req({ target: "/" }))).text()).toBe("1");
      const headers = new Headers({ host: "up", [key]: "k-1" });
      const res = await pool.request(req({ target: "/api/chat", method: "POST", headers, body: enc.encode("{}") }));
      expect(await res.text()).toBe("3");
    }
  });

  test("with two idle connections both dead, the retry goes on a fresh connection", async () => {
    let restarted = false;
    const old = new Set<Socket<{ got: string }>>();
    const waiting: (() => void)[] = [];
    const up = scriptedUpstream((s, _r, n) => {
      if (restarted && old.has(s)) return void s.terminate();
      old.add(s);
      const answer = () => s.write(`HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n${n}`);
      // The first two are answered together, so both connections are open at once.
      if (n > 2) return void answer();
      waiting.push(answer);
      if (waiting.length === 2) for (const w of waiting.splice(0)) w();
    });
    const pool = poolFor(up.url);
    await Promise.all([pool.request(req({ target: "/" })), pool.request(req({ target: "/" }))]);
    expect(pool.idleCount).toBe(2);
    restarted = true;
    const res = await pool.request(req({ target: "/api/ps" }));
    expect(res.status).toBe(200);
    expect(up.connections()).toBe(3);
  });

  test("bytes after an answer, in the same read, keep its connection out of the pool", async () => {
    const up = scriptedUpstream((s, _r, n) => s.write(`HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n${n}${n === 1 ? "JUNK" : ""}`));
    const pool = poolFor(up.url);
    expect(await (await pool.request(req({ target: "/" }))).text()).toBe("1");
    expect(pool.idleCount).toBe(0);
    expect(await (await pool.request(req({ target: "/" }))).text()).toBe("2");
    expect(up.connections()).toBe(2);
  });

  test("garbage from the upstream is an error with a clear message, not a hang", async () => {
    const up = scriptedUpstream((s) => s.write("SSH-2.0-OpenSSH_9.2\r\n\r\n"));
    await expect(poolFor(up.url).request(req({ target: "/" }))).rejects.toThrow(/bad status line/);
  });

  test("a refused connection is a connect-phase error (forward() retries those)", async () => {
    const l = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    const port = l.port;
    l.stop(true);
    const err = await poolFor(new URL(`http://127.0.0.1:${port}`))
      .request(req({ target: "/" }))
      .catch((e: unknown) => e);
    expect(isConnectPhaseError(err)).toBe(true);
  });

  test("aborting before the answer rejects with the reason and cuts the upstream connection", async () => {
    let closed = false;
    const up = scriptedUpstream(() => {});
    up.listener.reload({
      socket: {
        open(s) {
          s.data = { got: "" };
        },
        data() {},
        close() {
          closed = true;
        },
      },
    });
    const ac = new AbortController();
    const p = poolFor(up.url).request(req({ target: "/slow", signal: ac.signal }));
    await Bun.sleep(20);
    ac.abort(new Error("client went away"));
    await expect(p).rejects.toThrow("client went away");
    await until(() => closed);
  });

  test("cancelling a streamed body (the client left) closes the upstream connection and reports the end", async () => {
    let closed = false;
    const up = scriptedUpstream((s) => {
      s.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\ntick\r\n");
    });
    up.listener.reload({
      socket: {
        open(s) {
          s.data = { got: "" };
        },
        data(s) {
          s.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\ntick\r\n");
        },
        close() {
          closed = true;
        },
      },
    });
    const res = await poolFor(up.url).request(req({ target: "/stream" }));
    let ended = 0;
    onPooledBodyEnd(res, () => ended++);
    const reader = res.body!.getReader();
    await reader.read();
    await reader.cancel();
    await until(() => closed && ended === 1);
  });

  test("an idle pooled connection does not keep the process alive", async () => {
    const up = httpUpstream(() => new Response("ok"));
    const script = `
      import { poolFor } from ${JSON.stringify(`${import.meta.dir}/../../src/upstream/h1-pool.ts`)};
      const res = await poolFor(new URL(${JSON.stringify(up.url.href)})).request({ method: "GET", target: "/", headers: new Headers({ host: "x" }), body: undefined, signal: new AbortController().signal });
      console.log(await res.text());
    `;
    const proc = Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "pipe" });
    const timer = setTimeout(() => proc.kill(), 5000);
    const code = await proc.exited;
    clearTimeout(timer);
    expect(await new Response(proc.stdout).text()).toBe("ok\n");
    expect(code).toBe(0);
  });
});

describe("backpressure", () => {
  test("a client that stops reading makes the pool stop reading the upstream (memory stays flat)", async () => {
    const piece = new Uint8Array(64 * 1024).fill(120);
    let written = 0;
    const up = httpUpstream(
      () =>
        new Response(
          new ReadableStream({
            type: "direct",
            async pull(c: { write(b: Uint8Array): number | Promise<number>; flush(): unknown; close(): void }) {
              for (let i = 0; i < 4096; i++) {
                const w = c.write(piece);
                if (w instanceof Promise) await w;
                await c.flush();
                written += piece.length;
              }
              c.close();
            },
          } as unknown as UnderlyingDefaultSource<Uint8Array>),
        ),
    );
    const front = Bun.serve({ port: 0, hostname: "127.0.0.1", idleTimeout: 0, fetch: (r) => poolFor(up.url).request(req({ target: "/big", signal: r.signal })) });
    cleanups.push(() => void front.stop(true));
    // A client that sends its request and then never reads.
    const client = await Bun.connect({ hostname: "127.0.0.1", port: front.port!, socket: { data() {} } });
    cleanups.push(() => client.terminate());
    client.pause();
    client.write("GET /big HTTP/1.1\r\nhost: x\r\n\r\n");
    // Wait until the upstream has been stalled for a while (bounded), then look at how far it got.
    const deadline = Date.now() + 10_000;
    let last = -1;
    let still = 0;
    while (still < 10 && Date.now() < deadline) {
      still = written === last && written > 0 ? still + 1 : 0;
      last = written;
      await Bun.sleep(30);
    }
    expect(still).toBe(10);
    // 256 MiB would flow without backpressure; kernel buffers and Bun's sink hold a few MiB.
    expect(written).toBeLessThan(32 * 1024 * 1024);
  });
});

describe("which pool failures forward() may retry", () => {
  test("only a failure to connect: a timeout or unreachable host on an open connection is not one, whatever its code", () => {
    for (const code of ["ETIMEDOUT", "EHOSTUNREACH", "ECONNREFUSED"]) {
      expect(isConnectPhaseError(new UpstreamError(`socket error (${code})`, code))).toBe(false);
      expect(isConnectPhaseError(new UpstreamError(`connect failed (${code})`, code, true))).toBe(true);
    }
  });
});
