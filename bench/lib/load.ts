/**
 * Closed-loop HTTP load: `c` keep-alive connections, each sending its next request as soon as
 * the previous answer has arrived, for a fixed time. wrk when installed; otherwise a Bun
 * generator on raw sockets (slower than wrk, so it reports lower ceilings — the table says which).
 */
import { connect } from "node:net";
import { fileURLToPath } from "node:url";
import { now } from "./clock.ts";
import { serializeRequest, timedReader, type RequestSpec } from "./http1.ts";
import { percentile } from "./stats.ts";

export interface LoadResult {
  tool: "wrk" | "bun";
  connections: number;
  seconds: number;
  requests: number;
  rps: number;
  /** Response bytes per second (wrk counts head and body). */
  bytesPerSec: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  meanMs: number;
  maxMs: number;
  /** Connect/read/write/timeout errors plus answers >= 400. */
  errors: number;
}

export interface LoadSpec {
  url: string;
  connections: number;
  seconds: number;
  method?: string;
  body?: string;
  contentType?: string;
}

const LUA = fileURLToPath(new URL("../wrk-report.lua", import.meta.url));

export function findWrk(): string | undefined {
  return Bun.which("wrk") ?? undefined;
}

export async function runLoad(spec: LoadSpec, wrk: string | undefined): Promise<LoadResult> {
  return wrk ? runWrk(wrk, spec) : runBunLoad(spec);
}

async function runWrk(wrk: string, s: LoadSpec): Promise<LoadResult> {
  const proc = Bun.spawn(
    [wrk, "-t1", `-c${s.connections}`, `-d${s.seconds}s`, "--timeout", "10s", "-s", LUA, s.url],
    {
      env: { ...process.env, WRK_METHOD: s.method ?? "", WRK_BODY: s.body ?? "", WRK_CONTENT_TYPE: s.contentType ?? "" },
      stdout: "pipe",
      stderr: "pipe",
    },
  );
  const [out, err] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
  await proc.exited;
  const line = out.split("\n").find((l) => l.startsWith("WRKJSON "));
  if (!line) throw new Error(`wrk gave no summary (exit ${proc.exitCode}): ${err || out}`);
  const j = JSON.parse(line.slice(8)) as {
    requests: number;
    duration_us: number;
    bytes: number;
    errors: Record<string, number>;
    lat_us: { p50: number; p90: number; p99: number; mean: number; max: number };
  };
  const secs = j.duration_us / 1e6;
  const errors = Object.values(j.errors).reduce((a, b) => a + b, 0);
  return {
    tool: "wrk",
    connections: s.connections,
    seconds: secs,
    requests: j.requests,
    rps: j.requests / secs,
    bytesPerSec: j.bytes / secs,
    p50Ms: j.lat_us.p50 / 1000,
    p90Ms: j.lat_us.p90 / 1000,
    p99Ms: j.lat_us.p99 / 1000,
    meanMs: j.lat_us.mean / 1000,
    maxMs: j.lat_us.max / 1000,
    errors,
  };
}

/** The fallback generator: same closed loop, on raw keep-alive sockets. */
export async function runBunLoad(s: LoadSpec): Promise<LoadResult> {
  const url = new URL(s.url);
  const spec: RequestSpec = {
    method: s.method ?? "GET",
    path: `${url.pathname}${url.search}`,
    headers: s.contentType ? { "Content-Type": s.contentType } : {},
    body: s.body,
  };
  const wire = serializeRequest(url.host, spec);
  const lat: number[] = [];
  let bytes = 0;
  let errors = 0;
  const t0 = now();
  const end = t0 + s.seconds * 1000;
  const one = () =>
    new Promise<void>((resolve) => {
      const sock = connect({ host: url.hostname, port: Number(url.port), noDelay: true });
      let started = 0;
      const send = () => {
        if (now() >= end) {
          sock.destroy();
          resolve();
          return;
        }
        started = now();
        r.reader.expect(spec.method === "HEAD");
        sock.write(wire);
      };
      const r = timedReader({
        head: (status) => void ((status < 200 || status > 299) && errors++),
        end: (t) => {
          lat.push(t - started);
          send();
        },
      });
      sock.on("connect", send);
      sock.on("data", (d: Buffer) => {
        bytes += d.length;
        try {
          r.feed(d, now());
        } catch {
          errors++;
          sock.destroy();
        }
      });
      sock.on("error", () => {
        errors++;
        resolve();
      });
      sock.on("close", () => resolve());
    });
  await Promise.all(Array.from({ length: s.connections }, one));
  const secs = (now() - t0) / 1000;
  return {
    tool: "bun",
    connections: s.connections,
    seconds: secs,
    requests: lat.length,
    rps: lat.length / secs,
    bytesPerSec: bytes / secs,
    p50Ms: percentile(lat, 50),
    p90Ms: percentile(lat, 90),
    p99Ms: percentile(lat, 99),
    meanMs: lat.reduce((a, b) => a + b, 0) / Math.max(1, lat.length),
    maxMs: percentile(lat, 100),
    errors,
  };
}
