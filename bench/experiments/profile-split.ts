/**
 * Where the CPU of one proxied request goes, from a `--cpu-prof` profile of the turnstile under
 * load (`bench/experiments/run.ts profile`): each sample is charged to the innermost frame from
 * src/ on its stack (native callees included, e.g. a socket write to the function that called it),
 * and that frame's file and function to a stage. Samples with no src/ frame are Bun's own: the
 * server reading requests and writing answers, the event loop, the garbage collector.
 *
 *   bun bench/experiments/profile-split.ts PROFILE.cpuprofile [US_PER_REQUEST]
 */
interface Node {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
}

const STAGES: [string, RegExp][] = [
  ["upstream socket write (kernel send, loopback delivery)", /^upstream\/h1-pool\.ts:write -> write$/],
  ["header rebuilding (request head, response fields)", /^proxy\/headers\.ts|h1-pool\.ts:(send|responseHeaders)/],
  ["Response construction", /^upstream\/h1-pool\.ts:settle/],
  ["pool: response parse", /^upstream\/h1-response\.ts/],
  ["pool: exchange bookkeeping (signal, promise, release)", /^upstream\/h1-pool\.ts/],
  ["front door (Host guard, path, Content-Length)", /^proxy\/(front-door|host-guard)\.ts/],
  ["classification", /^proxy\/classify\.ts/],
  ["observer, logging, metrics", /^observe\/|^proxy\/app\.ts:(answered|end)/],
  ["serve callback, forward and app glue", /^proxy\/|^upstream\//],
];

const [file, usArg] = process.argv.slice(2);
const prof = (await Bun.file(file!).json()) as { nodes: Node[]; samples: number[] };
const nodes = new Map(prof.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const src = (n: Node) => (n.callFrame.url.includes("/src/") ? `${n.callFrame.url.replace(/.*\/src\//, "")}:${n.callFrame.functionName || "(anonymous)"}` : undefined);

const byStage = new Map<string, number>();
const byKey = new Map<string, number>();
for (const id of prof.samples) {
  const leaf = nodes.get(id)!;
  let key: string | undefined;
  for (let cur: number | undefined = id; cur !== undefined && !key; cur = parent.get(cur)) {
    const s = src(nodes.get(cur)!);
    if (s) key = cur === id ? s : `${s} -> ${leaf.callFrame.functionName || "(native)"}`;
  }
  const stage = key ? (STAGES.find(([, re]) => re.test(key))?.[0] ?? "other src/") : "Bun itself (server read/write, event loop, GC)";
  byStage.set(stage, (byStage.get(stage) ?? 0) + 1);
  if (key) byKey.set(key, (byKey.get(key) ?? 0) + 1);
}
const total = prof.samples.length;
const us = usArg ? Number(usArg) : undefined;
const show = (n: number) => `${((n / total) * 100).toFixed(1).padStart(5)} %${us ? `  ${((n / total) * us).toFixed(1).padStart(5)} µs` : ""}`;
console.log(`${total} samples${us ? `, ${us} µs of CPU per request` : ""}\n`);
for (const [stage, n] of [...byStage].sort((a, b) => b[1] - a[1])) console.log(`${show(n)}  ${stage}`);
console.log("\nlargest src/ frames:");
for (const [key, n] of [...byKey].sort((a, b) => b[1] - a[1]).slice(0, 15)) console.log(`${show(n)}  ${key}`);

export {};
