/**
 * The chaos run's abuser (issue 26), beside the usual traffic: zstd bodies of a few hundred bytes
 * that inflate to megabytes (most naming a cloud model at their very end, some a local one, one a bomb, one cut
 * short), idle client connections, and /ws clients that never read. Meanwhile /healthz is asked
 * on both listeners; the slowest answer is reported.
 */
import { connect, type Socket } from "node:net";

export interface AbuseReport {
  /** The slowest /healthz answer on either listener while the abuse ran, ms. */
  worstHealthzMs: number;
  healthzAsked: number;
  /** Status of each zstd request, by what it was. */
  zstd: { kind: "cloud" | "local" | "bomb" | "cut"; status: number | string }[];
}

/** A body of `size` bytes inflated, its model last. */
function inflating(size: number, model: string): Uint8Array {
  const head = '{"input":"';
  const tail = `","model":"${model}"}`;
  return Bun.zstdCompressSync(head + "a".repeat(size - head.length - tail.length) + tail);
}

type Kind = AbuseReport["zstd"][number]["kind"];

/**
 * The bodies, made before the clock starts: compressing them would stall this process (and the
 * turnstile in it) and be counted against /healthz. Each inflates to a few MiB: the simulated
 * Ollama in this process inflates the ones forwarded too.
 */
export function abuseBodies(): [Kind, Uint8Array][] {
  const cloud = inflating(4 << 20, "gpt-oss:120b-cloud");
  const local = inflating(1 << 20, "llama3.2");
  return [
    ...Array.from({ length: 6 }, (): [Kind, Uint8Array] => ["cloud", cloud]),
    ["local", local],
    ["local", local],
    ["bomb", Bun.zstdCompressSync(new Uint8Array(21 << 20))],
    ["cut", cloud.subarray(0, cloud.length - 4)],
  ];
}

/** Runs until `stop` resolves, then closes what it opened and reports. */
export async function abuse(ollama: string, comfy: string, bodies: [Kind, Uint8Array][], stop: Promise<unknown>): Promise<AbuseReport> {
  let stopped = false;
  void stop.finally(() => (stopped = true));
  const report: AbuseReport = { worstHealthzMs: 0, healthzAsked: 0, zstd: [] };

  const healthz = (async () => {
    while (!stopped) {
      await Promise.all(
        [ollama, comfy].map(async (base) => {
          const t0 = performance.now();
          await (await fetch(`${base}/healthz`)).arrayBuffer();
          report.worstHealthzMs = Math.max(report.worstHealthzMs, performance.now() - t0);
          report.healthzAsked++;
        }),
      );
      await Bun.sleep(25);
    }
  })();

  const zstd = Promise.all(
    bodies.map(async ([kind, body]) => {
      const status = await fetch(`${ollama}/v1/responses`, { method: "POST", body: body as BodyInit, headers: { "content-type": "application/json", "content-encoding": "zstd" } })
        .then(async (r) => (await r.arrayBuffer(), r.status))
        .catch((e: unknown) => String(e));
      report.zstd.push({ kind, status });
    }),
  );

  // Kept alive after an answer, then silent: they sit on the listeners while the traffic runs
  // (client-idle.test.ts proves CLIENT_IDLE_TIMEOUT closes them; here they are load).
  const idle: Socket[] = [];
  for (let i = 0; i < 20; i++) {
    const base = new URL(i % 2 ? ollama : comfy);
    const sock = connect(Number(base.port), base.hostname, () => sock.write(`GET /healthz HTTP/1.1\r\nHost: ${base.host}\r\n\r\n`));
    sock.on("error", () => {});
    idle.push(sock);
  }

  // /ws clients that never read what ComfyUI sends them.
  const deaf: WebSocket[] = [];
  for (let i = 0; i < 4; i++) {
    const ws = new WebSocket(`${comfy.replace("http", "ws")}/ws?clientId=deaf-${i}`) as WebSocket & { pause(): void };
    ws.onopen = () => ws.pause();
    ws.onerror = () => {};
    deaf.push(ws);
  }

  await Promise.all([healthz, zstd]);
  for (const ws of deaf) ws.close();
  for (const sock of idle) sock.destroy();
  return report;
}
