/**
 * The benchmark's results as markdown: the targets with PASS/MISS first, then one table per
 * scenario. Pure: everything it shows comes from the Results object (also written as JSON).
 */
import type { Memory } from "./lib/proc.ts";
import { median, type Summary } from "./lib/stats.ts";
import type { DownloadRow } from "./scenarios/download.ts";
import type { HandoffResult } from "./scenarios/handoff.ts";
import { ratiosByRound, type FloorRound } from "./scenarios/floor.ts";
import type { ManyRow } from "./scenarios/many-streams.ts";
import type { PassRow } from "./scenarios/passthrough.ts";
import type { SessionRow, SessionWorkload } from "./scenarios/sessions.ts";
import type { CardsRow, CardsWorkload } from "./scenarios/cards.ts";
import type { StreamingRow } from "./scenarios/streaming.ts";

export interface MachineInfo {
  date: string;
  cpu: string;
  cores: number;
  memGiB: number;
  kernel: string;
  os: string;
  bun: string;
  nginx: string | undefined;
  nginxSettings?: string;
  wrk: string | undefined;
  upstream: string;
  commit: string;
  /** CPU use by other processes in the second before the run, % of all cores. */
  backgroundCpuPct: number;
}

export interface StartupRow {
  binary: string;
  how: string;
  ms?: Summary;
  failures: number;
  error?: string;
}

export interface Results {
  command: string;
  machine: MachineInfo;
  settings: Record<string, unknown>;
  skipped: string[];
  passThrough?: PassRow[];
  streaming?: StreamingRow[];
  download?: DownloadRow[];
  manyStreams?: ManyRow[];
  handoff?: HandoffResult;
  startup?: StartupRow[];
  sessions?: { workload: SessionWorkload; rows: SessionRow[] };
  cards?: { workload: CardsWorkload; haproxy: string; rows: CardsRow[] };
  /** Scenario 8: every round of every subject (turnstile, floor, nginx-1w). */
  floor?: FloorRound[];
  durationS?: number;
}

export interface TargetCheck {
  what: string;
  measured: string;
  goal: string;
  pass: boolean | undefined;
  /** What the same run says about the cause (the other subjects' figures). */
  context?: string;
}

const f = (x: number | undefined, d = 2): string => (x === undefined || !Number.isFinite(x) ? "n/a" : x.toFixed(d));
const k = (x: number): string => (Number.isFinite(x) ? Math.round(x).toLocaleString("en-US") : "n/a");
const mib = (m: Memory | undefined): string => (m && Number.isFinite(m.rssKiB) ? `${(m.rssKiB / 1024).toFixed(1)} MiB` : "n/a");
const verdict = (p: boolean | undefined): string => (p === undefined ? "n/a" : p ? "**PASS**" : "**MISS**");

function pass(rows: PassRow[] | undefined, subject: string, c: number): PassRow | undefined {
  return rows?.find((r) => r.subject === subject && r.connections === c);
}

/** The one-worker nginx row when there is one (issue 14's reference), else nginx with its default workers. */
function reference(rows: PassRow[] | undefined, c: number): PassRow | undefined {
  return pass(rows, "nginx-1w", c) ?? pass(rows, "nginx", c);
}

export function targets(r: Results): TargetCheck[] {
  const out: TargetCheck[] = [];
  const cpu = (x: PassRow | undefined) => (x?.cpuUsPerReq === undefined ? "n/a" : `${f(x.cpuUsPerReq, 0)} µs`);
  const d1 = pass(r.passThrough, "direct", 1);
  const t1 = pass(r.passThrough, "turnstile", 1);
  if (d1 && t1) {
    const added = t1.p50Ms - d1.p50Ms;
    const b1 = pass(r.passThrough, "bun-bare", 1);
    const n1 = pass(r.passThrough, "nginx-1w", 1) ?? pass(r.passThrough, "nginx", 1);
    const ctx = [b1 && `bare Bun proxy adds ${f(b1.p50Ms - d1.p50Ms, 3)} ms`, n1 && `${n1.subject} ${f(n1.p50Ms - d1.p50Ms, 3)} ms`].filter(Boolean).join(", ");
    out.push({ what: "Small JSON, added p50 latency at c=1", measured: `${f(added, 3)} ms (${f(t1.p50Ms, 3)} vs direct ${f(d1.p50Ms, 3)})`, goal: "≤ 0.1 ms", pass: added <= 0.1, context: ctx });
  }
  const t16 = pass(r.passThrough, "turnstile", 16);
  const n16 = reference(r.passThrough, 16);
  const b16 = pass(r.passThrough, "bun-bare", 16);
  const auto16 = pass(r.passThrough, "nginx", 16);
  if (t16 && n16 && t16.cpuUsPerReq !== undefined && n16.cpuUsPerReq !== undefined) {
    const ratio = t16.cpuUsPerReq / n16.cpuUsPerReq;
    out.push({
      what: `Small JSON, proxy CPU per request at c=16 vs ${n16.subject}`,
      measured: `${f(ratio, 2)}× (${cpu(t16)} vs ${cpu(n16)})`,
      goal: "≤ 1.5×",
      pass: ratio <= 1.5,
      context: `bare Bun proxy ${cpu(b16)}${auto16 && auto16 !== n16 ? `, nginx (auto workers) ${cpu(auto16)}` : ""}`,
    });
  }
  if (t16 && n16) {
    const ratio = t16.rps / n16.rps;
    out.push({
      what: `Small JSON, throughput at c=16 vs ${n16.subject}`,
      measured: `${f(ratio * 100, 0)} % (${k(t16.rps)} vs ${k(n16.rps)} req/s)`,
      goal: "≥ 80 %",
      pass: ratio >= 0.8,
      context: `${b16 ? `bare Bun proxy reaches ${f((b16.rps / n16.rps) * 100, 0)} %` : ""}${auto16 && auto16 !== n16 ? `; the turnstile reaches ${f((t16.rps / auto16.rps) * 100, 0)} % of nginx (auto workers)` : ""}`,
    });
  } else if (t16) {
    out.push({ what: "Small JSON, throughput at c=16 vs nginx", measured: `${k(t16.rps)} req/s; nginx not measured`, goal: "≥ 80 %", pass: undefined });
  }
  const sd = r.streaming?.find((s) => s.subject === "direct" && s.concurrency === 1);
  const st = r.streaming?.find((s) => s.subject === "turnstile" && s.concurrency === 1);
  if (sd && st) {
    const added = st.chunkMs.p50 - sd.chunkMs.p50;
    const sn = r.streaming?.find((x) => x.subject === "nginx" && x.concurrency === 1);
    out.push({ what: "Streaming, added latency per chunk (p50, c=1)", measured: `${f(added, 3)} ms`, goal: "< 1 ms (no regression)", pass: added < 1, context: sn ? `nginx adds ${f(sn.chunkMs.p50 - sd.chunkMs.p50, 3)} ms` : undefined });
  }
  if (r.handoff && r.handoff.llmToImageMs.n > 0) {
    const h = r.handoff;
    const worst = Math.max(h.llmToImageMs.p50, h.imageToLlmMs.p50);
    out.push({
      what: "Lock hand-off beyond the unload/free waits (p50)",
      measured: `LLM→image ${f(h.llmToImageMs.p50, 3)} ms, image→LLM ${f(h.imageToLlmMs.p50, 3)} ms`,
      goal: "< 2 ms",
      pass: worst < 2,
      context: `LLM→image = release → first \`/api/ps\` ${f(h.releaseToPsMs.p50, 3)} ms + last \`/api/ps\` → \`/prompt\` ${f(h.psToPromptMs.p50, 3)} ms: each is one or two upstream round trips on the pooled connections`,
    });
  }
  const mt = r.manyStreams?.find((m) => m.subject === "turnstile");
  if (mt) {
    const all = mt.gotFirstChunk === mt.streams;
    const md = r.manyStreams?.find((m) => m.subject === "direct");
    out.push({
      what: "1,000 open streams: all get their first chunk",
      measured: `${mt.gotFirstChunk}/${mt.streams}, slowest ${k(mt.ttfcMs.max)} ms`,
      goal: "all",
      pass: all,
      context: md ? `direct: slowest ${k(md.ttfcMs.max)} ms (the simulator answering 1,000 requests at once)` : undefined,
    });
    const rss = mt.memOpen ? mt.memOpen.rssKiB / 1024 : NaN;
    const mb = r.manyStreams?.find((m) => m.subject === "bun-bare");
    const perStream = (m: ManyRow | undefined) =>
      m?.memOpen && m.memIdle ? `${f(((m.memOpen.rssKiB - m.memIdle.rssKiB) * 1024) / m.streams / 1024, 1)} KiB` : "n/a";
    out.push({
      what: "1,000 open streams: RSS of the serving process",
      measured: mib(mt.memOpen),
      goal: "< 60 MiB",
      pass: Number.isFinite(rss) ? rss < 60 : undefined,
      context: `idle ${mib(mt.memIdle)}${mt.memDashboards ? `, ${mib(mt.memDashboards)} with ${mt.dashboards} status pages open` : ""} + ${perStream(mt)} per stream; bare Bun proxy: idle ${mib(mb?.memIdle)} + ${perStream(mb)} per stream`,
    });
  }
  const fr = r.floor ? ratiosByRound(r.floor, "turnstile", "floor") : [];
  if (fr.length) {
    const rounds = (subject: string) => r.floor!.filter((x) => x.subject === subject);
    const us = (subject: string) => rounds(subject).map((x) => f(x.cpuUsPerReq, 1)).join(" / ");
    const cpu = median(fr.map((x) => x.cpu));
    const rps = median(fr.map((x) => x.rps));
    const ng = rounds("nginx-1w");
    out.push({
      what: "Small JSON from memory (scenario 8), proxy CPU per request at c=16 vs the floor (bare Bun proxy), median of the rounds",
      measured: `${f(cpu, 2)}× (rounds ${fr.map((x) => f(x.cpu, 2)).join(" / ")}; ${us("turnstile")} vs ${us("floor")} µs)`,
      goal: "≤ 1.10×",
      pass: cpu <= 1.1,
      context: ng.length ? `nginx-1w ${us("nginx-1w")} µs` : undefined,
    });
    out.push({
      what: "Small JSON from memory (scenario 8), throughput at c=16 vs the floor, median of the rounds",
      measured: `${f(rps, 2)}× (rounds ${fr.map((x) => f(x.rps, 2)).join(" / ")})`,
      goal: "≥ 0.90×",
      pass: rps >= 0.9,
      context: "the floor's fetch runs its upstream sockets on a second thread (Bun's HTTP client thread); the turnstile's pooled client runs on the JavaScript thread",
    });
  }
  const su = r.startup?.find((s) => s.binary === "gpu-turnstile" && s.how.startsWith("as a user starts it"));
  if (su) {
    const pre = r.startup?.find((s) => s.binary === "gpu-turnstile" && s.how.startsWith("BUN_CONFIG"));
    const min = r.startup?.find((s) => s.binary.startsWith("minimal"));
    const ratio = su.ms && min?.ms ? su.ms.p50 / min.ms.p50 : undefined;
    out.push({
      what: "Compiled binary, start to first /healthz answer (median) vs a minimal compiled Bun.serve",
      measured: su.ms ? `${ratio === undefined ? "" : `${f(ratio, 1)}× (`}${f(su.ms.p50, 1)} ms${ratio === undefined ? "" : ` vs ${f(min?.ms?.p50, 1)} ms)`}` : (su.error ?? "failed"),
      goal: "≤ 2×",
      pass: ratio === undefined ? false : ratio <= 2,
      context: `one process (only an https upstream makes it re-run itself to lift Bun's fetch limit); with the limit preset ${f(pre?.ms?.p50, 1)} ms`,
    });
  }
  return out;
}

export function renderMarkdown(r: Results): string {
  const L: string[] = [];
  const m = r.machine;
  L.push(`Command: \`${r.command}\` (from the repository root; \`bun run bench\` is the same).`, "");
  L.push(
    `Machine: ${m.cpu}, ${m.cores} cores, ${m.memGiB} GiB RAM, ${m.os} ${m.kernel}; Bun ${m.bun}; nginx ${m.nginx ?? "not installed"}${m.nginxSettings ? ` (${m.nginxSettings})` : ""}; load generator ${m.wrk ?? "Bun raw-socket generator (wrk not installed)"}; upstream ${m.upstream}; commit ${m.commit}; ${m.date}; other processes were using ${f(m.backgroundCpuPct, 0)} % of the CPU just before the run${r.durationS ? `; whole run ${f(r.durationS, 0)} s` : ""}.`,
    "",
  );
  L.push("Load generator, upstreams, turnstile, nginx and the bare Bun proxy are separate processes on the same 2 shared cores, talking over loopback; figures move by 10–20 % between runs.", "");
  for (const s of r.skipped) L.push(`> Skipped: ${s}`, "");

  L.push("### Targets", "", "| Target | Measured | Goal | Result | Same run, for context |", "|---|---|---|---|---|");
  for (const t of targets(r)) L.push(`| ${t.what} | ${t.measured} | ${t.goal} | ${verdict(t.pass)} | ${t.context ?? ""} |`);
  L.push("");

  if (r.passThrough?.length) {
    const s = r.settings as { passSeconds?: number; passRounds?: number };
    L.push(
      `### 1. Small JSON pass-through — \`GET /api/tags\` (${k(r.passThrough[0]!.bytesPerSec / Math.max(1, r.passThrough[0]!.rps))} B per answer incl. head)`,
      "",
      `Closed loop, wrk with one thread. After a 1 s warm-up, the subjects take turns ${s.passRounds ?? "?"} times for ${s.passSeconds ?? "?"} s each; the best round counts (all rounds are in the JSON). Proxy CPU: user + system time of all the proxy's threads and processes during that round, from /proc, divided by the requests served — less sensitive to other load on the machine than req/s.`,
      "",
    );
    L.push("| c | subject | req/s | p50 ms | p99 ms | vs direct | vs nginx | vs nginx-1w | proxy CPU µs/req | errors |", "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    const vs = (row: PassRow, ref: PassRow | undefined) => (ref ? `${f((row.rps / ref.rps) * 100, 0)} %` : "n/a");
    for (const row of r.passThrough) {
      const c = row.connections;
      L.push(
        `| ${c} | ${row.subject} | ${k(row.rps)} | ${f(row.p50Ms, 3)} | ${f(row.p99Ms, 3)} | ${vs(row, pass(r.passThrough, "direct", c))} | ${vs(row, pass(r.passThrough, "nginx", c))} | ${vs(row, pass(r.passThrough, "nginx-1w", c))} | ${row.cpuUsPerReq === undefined ? "—" : f(row.cpuUsPerReq, 0)} | ${row.errors} |`,
      );
    }
    L.push("");
  }

  if (r.streaming?.length) {
    const s = r.settings as { streamTokens?: number; streamTokenDelayMs?: number };
    L.push(
      `### 2. Streaming — \`POST /api/chat\` NDJSON, ${s.streamTokens ?? "?"} tokens ${s.streamTokenDelayMs ?? "?"} ms apart`,
      "",
      "Time to first chunk: request written → first NDJSON line read. Chunk delivery: arrival at the client − the upstream's `created_at` on that chunk (different processes' clocks: compare against direct, whose offset is the same).",
      "",
      "| c | subject | streams | TTFC p50 ms | TTFC added | delivery p50 ms | added per chunk (p50) | delivery p99 ms | failed |",
      "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    );
    for (const row of r.streaming) {
      const d = r.streaming.find((x) => x.subject === "direct" && x.concurrency === row.concurrency);
      const add = (a: number, b: number | undefined) => (b === undefined || row.subject === "direct" ? "—" : f(a - b, 3));
      L.push(
        `| ${row.concurrency} | ${row.subject} | ${row.streams} | ${f(row.ttfcMs.p50, 3)} | ${add(row.ttfcMs.p50, d?.ttfcMs.p50)} | ${f(row.chunkMs.p50, 3)} | ${add(row.chunkMs.p50, d?.chunkMs.p50)} | ${f(row.chunkMs.p99, 3)} | ${row.failed} |`,
      );
    }
    L.push("");
  }

  if (r.download?.length) {
    const s = r.settings as { downloadSeconds?: number };
    L.push(`### 3. 8 MiB download — \`GET /view?filename=big.png\` on the ComfyUI listener, ${s.downloadSeconds ?? "?"} s per cell`, "");
    L.push("| c | subject | MiB/s | downloads/s | vs direct | errors |", "|---:|---|---:|---:|---:|---:|");
    for (const row of r.download) {
      const d = r.download.find((x) => x.subject === "direct" && x.connections === row.connections);
      L.push(`| ${row.connections} | ${row.subject} | ${k(row.mibPerSec)} | ${f(row.rps, 1)} | ${d ? `${f((row.mibPerSec / d.mibPerSec) * 100, 0)} %` : "n/a"} | ${row.errors} |`);
    }
    L.push("");
  }

  if (r.manyStreams?.length) {
    const s = r.settings as { manyStreams?: number; slowTokenDelayMs?: number };
    L.push(
      `### 4. ${k(s.manyStreams ?? 1000)} concurrent open streams — \`POST /api/chat\`, one token every ${s.slowTokenDelayMs ?? "?"} ms`,
      "",
      "All requests written at once to a freshly started proxy. TTFB: response head; first chunk: first NDJSON line (the upstream sends it one token delay after the request). RSS of the serving process (nginx: master + workers) from /proc.",
      "",
      "| subject | got first chunk | slowest TTFB ms | first chunk p50 ms | slowest first chunk ms | RSS idle | RSS with all open | RSS after close |",
      "|---|---:|---:|---:|---:|---:|---:|---:|",
    );
    for (const row of r.manyStreams) {
      L.push(
        `| ${row.subject} | ${row.gotFirstChunk}/${row.streams} | ${k(row.ttfbMs.max)} | ${k(row.ttfcMs.p50)} | ${k(row.ttfcMs.max)} | ${mib(row.memIdle)} | ${mib(row.memOpen)} | ${mib(row.memAfter)} |`,
      );
    }
    L.push("");
  }

  if (r.handoff) {
    const h = r.handoff;
    const ok = h.cycles.filter((c) => c.ok).length;
    L.push(
      `### 5. Lock hand-off (turnstile only) — ${ok}/${h.cycles.length} cycles`,
      "",
      "Times from the simulators' own call logs (one process, one clock). LLM→image: (first `/api/ps` − the `created_at` of the chat's final chunk) + (`/prompt` arrival at ComfyUI − last `/api/ps`); excluded unload wait = first → last `/api/ps`. image→LLM: waiting chat's arrival at Ollama − last `/system_stats` poll; excluded free wait = `/free` → that poll.",
      "",
      "| hand-off | overhead p50 ms | overhead max ms | excluded wait p50 ms |",
      "|---|---:|---:|---:|",
      `| last LLM response done → \`/prompt\` forwarded | ${f(h.llmToImageMs.p50, 3)} | ${f(h.llmToImageMs.max, 3)} | ${f(h.unloadWaitMs.p50, 1)} (unload) |`,
      `| … of which: final chunk stamped → first \`/api/ps\` | ${f(h.releaseToPsMs.p50, 3)} | ${f(h.releaseToPsMs.max, 3)} | |`,
      `| … of which: last \`/api/ps\` → \`/prompt\` arrives | ${f(h.psToPromptMs.p50, 3)} | ${f(h.psToPromptMs.max, 3)} | |`,
      `| \`/free\` done → waiting LLM request forwarded | ${f(h.imageToLlmMs.p50, 3)} | ${f(h.imageToLlmMs.max, 3)} | ${f(h.freeWaitMs.p50, 1)} (free) |`,
      "",
    );
  }

  if (r.startup?.length) {
    L.push("### 6. Compiled binary: exec → first `/healthz` answer", "", "| binary | started | runs | median ms | min ms | max ms |", "|---|---|---:|---:|---:|---:|");
    for (const s of r.startup) {
      if (!s.ms) L.push(`| ${s.binary} | ${s.how} | 0 | ${s.error ?? "failed"} | | |`);
      else L.push(`| ${s.binary} | ${s.how} | ${s.ms.n} | ${f(s.ms.p50, 1)} | ${f(s.ms.min, 1)} | ${f(s.ms.max, 1)} |`);
    }
    L.push("");
  }
  if (r.floor?.length) {
    const s = r.settings as { floorSeconds?: number; floorConcurrency?: number };
    L.push(
      `### 8. The floor of a Bun proxy — \`GET /api/tags\` answered from memory, c=${s.floorConcurrency ?? "?"}`,
      "",
      `The upstream is \`bench/memory-upstream.ts\` (a Bun.serve with a fixed 1,457-byte JSON), so only the proxies differ. The floor is \`bench/bare-proxy.ts\` (Bun.serve → fetch → its Response); the turnstile is the compiled binary. The subjects take turns, ${s.floorSeconds ?? "?"} s each, round after round; the ratios are per round.`,
      "",
      "| round | subject | req/s | proxy CPU µs/req | CPU vs floor | req/s vs floor | errors |",
      "|---:|---|---:|---:|---:|---:|---:|",
    );
    for (const row of r.floor) {
      const ref = r.floor.find((x) => x.subject === "floor" && x.round === row.round);
      const vs = (a: number, b: number | undefined) => (b === undefined || row.subject === "floor" ? "—" : `${f(a / b, 2)}×`);
      L.push(`| ${row.round} | ${row.subject} | ${k(row.rps)} | ${f(row.cpuUsPerReq, 1)} | ${vs(row.cpuUsPerReq, ref?.cpuUsPerReq)} | ${vs(row.rps, ref?.rps)} | ${row.errors} |`);
    }
    L.push("");
  }
  return L.join("\n");
}

export const BEGIN = "<!-- bench:begin (generated by bench/run.ts; everything outside these markers is kept) -->";
export const END = "<!-- bench:end -->";

/** Replace the generated part of docs/BENCHMARKS.md, keeping the hand-written text around it. */
export function spliceDoc(existing: string | undefined, generated: string): string {
  const block = `${BEGIN}\n${generated.trimEnd()}\n${END}`;
  if (existing) {
    const a = existing.indexOf(BEGIN);
    const b = existing.indexOf(END);
    if (a >= 0 && b > a) return `${existing.slice(0, a)}${block}${existing.slice(b + END.length)}`;
  }
  return `# Benchmarks\n\n${block}\n`;
}

/**
 * Scenario 7's table. It measures a workload's timeline, not the proxy's speed, so it does not
 * depend on how busy the machine is and has its own section in docs/BENCHMARKS.md, written by any
 * run that includes it.
 */
export function renderSessions(r: NonNullable<Results["sessions"]>, date: string, commit: string): string {
  const w = r.workload;
  const sec = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  const L = [
    `### 7. Image sessions — a burst of ${w.images} image jobs with chats arriving throughout`,
    "",
    `${date}, commit ${commit}; median of ${w.rounds} rounds each. Simulated card: ComfyUI jobs of ${w.jobMs} ms, a cold checkpoint load of ${w.loadMs} ms (after every \`/free\` that unloaded it), memory back ${w.freeDelayMs} ms after \`/free\`; Ollama loads a model in 300 ms and streams 20 tokens 20 ms apart. ${w.chats} chats, one every ${w.chatEveryMs} ms from t=0; the ${w.images} image jobs arrive together at t=${w.burstAtMs} ms. Makespan: first request → last image finished or last chat answered. LLM wait: a chat's time to its first byte.`,
    "",
    "| `IMAGE_SESSION_MAX` | makespan | checkpoint loads | `/free` calls | longest LLM wait | all done, 0 overlaps |",
    "|---|---:|---:|---:|---:|---|",
  ];
  for (const row of r.rows) {
    const label = row.imageSessionMax === "0" ? "`0` (one job per cycle)" : `\`${row.imageSessionMax}\` (default)`;
    L.push(`| ${label} | ${sec(row.makespanMs)} | ${row.checkpointLoads} | ${row.frees} | ${sec(row.longestLlmWaitMs)} | ${row.complete ? "yes" : "**no**"} |`);
  }
  L.push("");
  return L.join("\n");
}

export function renderCards(r: NonNullable<Results["cards"]>, date: string, commit: string): string {
  const w = r.workload;
  const sec = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
  const L = [
    `### 9. Several cards — the same mixed workload on one card and on two cards behind HAProxy`,
    "",
    `${date}, commit ${commit}, ${r.haproxy}; median of ${w.rounds} rounds each. Each card: its own simulated GPU, Ollama, ComfyUI and turnstile (defaults, IMAGE_SESSION_MAX 5m), ComfyUI jobs of ${w.jobMs} ms, a cold checkpoint load of ${w.loadMs} ms, memory back ${w.freeDelayMs} ms after \`/free\`; Ollama loads a model in 300 ms and streams 20 tokens 20 ms apart. ${w.chats} chats, one every ${w.chatEveryMs} ms from t=0; ${w.images} image jobs from ${w.images} clients (their own \`client_id\`) arrive together at t=${w.burstAtMs} ms. One card: clients talk to its turnstile. Two cards: clients talk to HAProxy running \`deploy/haproxy.cfg\` as shipped. Image makespan: the burst → the last image finished; throughput: images / makespan. Chat wait: time to the first byte (p95 of the chats answered). "Waited beside a free card": chats that began waiting at a card while another admitted chats at once (goal 0; most over the rounds — a chat that arrives within one HAProxy check after a card frees can still be sent to wait at a busy one). "Refused": chats that every card refused with 503 because all turned busy within one HAProxy check (the recipe's stated limit; most over the rounds).`,
    "",
    "| cards | image makespan | images/min | vs 1 card | p95 chat wait | waited beside a free card | refused | all done, 0 overlaps |",
    "|---:|---:|---:|---:|---:|---:|---:|---|",
  ];
  const base = r.rows.find((x) => x.cards === 1)?.imagesPerMin;
  for (const row of r.rows) {
    const x = base ? `${(row.imagesPerMin / base).toFixed(2)}×` : "–";
    L.push(`| ${row.cards} | ${sec(row.imageMakespanMs)} | ${row.imagesPerMin.toFixed(1)} | ${x} | ${sec(row.p95ChatWaitMs)} | ${row.chatsWaitingBesideFreeCard} | ${row.chatsRefused} | ${row.complete ? "yes" : "**no**"} |`);
  }
  L.push("");
  return L.join("\n");
}

export const CARDS_BEGIN = "<!-- bench:cards:begin (generated by bench/run.ts --only 9) -->";
export const CARDS_END = "<!-- bench:cards:end -->";

export const SESSIONS_BEGIN = "<!-- bench:sessions:begin (generated by bench/run.ts --only 7) -->";
export const SESSIONS_END = "<!-- bench:sessions:end -->";

/** Replace scenario 7's section (appended at the end when the file has none yet). */
export function spliceSessions(existing: string, generated: string): string {
  return spliceSection(existing, generated, SESSIONS_BEGIN, SESSIONS_END);
}

/** Replace scenario 9's section (appended at the end when the file has none yet). */
export function spliceCards(existing: string, generated: string): string {
  return spliceSection(existing, generated, CARDS_BEGIN, CARDS_END);
}

function spliceSection(existing: string, generated: string, begin: string, end: string): string {
  const block = `${begin}\n${generated.trimEnd()}\n${end}`;
  const a = existing.indexOf(begin);
  const b = existing.indexOf(end);
  if (a >= 0 && b > a) return `${existing.slice(0, a)}${block}${existing.slice(b + end.length)}`;
  return `${existing.trimEnd()}\n\n${block}\n`;
}
