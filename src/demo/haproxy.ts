/**
 * HAProxy in front of several turnstiles, run from the shipped recipe (deploy/haproxy.cfg): the
 * recipe's card addresses and listen ports are replaced, nothing else, so what the demo, the test
 * and the bench run is what an operator copies. The Debian package `haproxy` provides the binary;
 * without it `findHaproxy` says so and callers skip.
 */
import { spawn, type Subprocess } from "bun";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import recipe from "../../deploy/haproxy.cfg" with { type: "text" };

/** The recipe's addresses of card 1 and card 2, and its listen ports. */
const RECIPE_CARDS = ["192.168.1.11", "192.168.1.12"] as const;
const RECIPE_PORTS = { ollama: 11434, comfy: 8188 } as const;

export interface CardAddress {
  /** host:port of the card's turnstile, Ollama side and ComfyUI side. */
  ollama: string;
  comfy: string;
}

export interface HaproxyPorts {
  ollama: number;
  comfy: number;
}

/** The haproxy binary and its version line, or undefined when it is not installed. */
export function findHaproxy(): { path: string; version: string } | undefined {
  const path = Bun.which("haproxy") ?? (Bun.file("/usr/sbin/haproxy").size > 0 ? "/usr/sbin/haproxy" : undefined);
  if (!path) return undefined;
  const r = Bun.spawnSync([path, "-v"]);
  if (r.exitCode !== 0) return undefined;
  return { path, version: r.stdout.toString().split("\n")[0]!.trim() };
}

/**
 * The recipe for `cards` (one or two) on 127.0.0.1 `listen` ports, with a stats socket: the
 * server lines of a card that is not there are dropped.
 */
export function renderRecipe(cards: readonly CardAddress[], listen: HaproxyPorts, statsSocket: string): string {
  if (cards.length < 1 || cards.length > RECIPE_CARDS.length) throw new Error(`the recipe has ${RECIPE_CARDS.length} cards; asked for ${cards.length}`);
  const out: string[] = [];
  for (const line of recipe.split("\n")) {
    const card = RECIPE_CARDS.findIndex((a) => line.includes(`${a}:`));
    if (card >= cards.length) continue;
    let l = line;
    if (card >= 0) {
      l = l.replace(`${RECIPE_CARDS[card]}:${RECIPE_PORTS.ollama}`, cards[card]!.ollama).replace(`${RECIPE_CARDS[card]}:${RECIPE_PORTS.comfy}`, cards[card]!.comfy);
    }
    l = l.replace(`bind :${RECIPE_PORTS.ollama}`, `bind 127.0.0.1:${listen.ollama}`).replace(`bind :${RECIPE_PORTS.comfy}`, `bind 127.0.0.1:${listen.comfy}`);
    out.push(l);
    if (l.trim() === "global") out.push(`    stats socket ${statsSocket} mode 600 level admin`);
  }
  return out.join("\n");
}

export interface RunningHaproxy {
  ollama: string;
  comfy: string;
  /** `backend/server` → status (UP, DOWN, DRAIN, …) from the stats socket. */
  servers(): Promise<Record<string, string>>;
  /** One command on HAProxy's admin socket (`disable health llm/card1`), its answer. */
  command(line: string): Promise<string>;
  /** What HAProxy wrote (its warnings and alerts). */
  output(): string;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}

/** One command on the stats socket, its whole answer. */
function statsCommand(socket: string, command: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = "";
    Bun.connect({
      unix: socket,
      socket: {
        open: (s) => void s.write(`${command}\n`),
        data: (_s, d) => void (got += d.toString()),
        close: () => resolve(got),
        error: (_s, e) => reject(e),
      },
    }).catch(reject);
  });
}

/** Starts HAProxy from the recipe in front of `cards`; resolves once every server of every backend has been checked UP. */
export async function startHaproxy(haproxyPath: string, cards: readonly CardAddress[], timeoutMs = 10_000): Promise<RunningHaproxy> {
  const dir = mkdtempSync(join(tmpdir(), "gpu-turnstile-haproxy-"));
  const socket = join(dir, "stats.sock");
  const listen = { ollama: await freePort(), comfy: await freePort() };
  const cfg = join(dir, "haproxy.cfg");
  writeFileSync(cfg, renderRecipe(cards, listen, socket), { mode: 0o600 });
  let out = "";
  const proc: Subprocess<"ignore", "pipe", "pipe"> = spawn([haproxyPath, "-db", "-f", cfg], { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  const drain = async (s: ReadableStream<Uint8Array>) => {
    for await (const chunk of s) out += new TextDecoder().decode(chunk);
  };
  void drain(proc.stdout);
  void drain(proc.stderr);
  const servers = async (): Promise<Record<string, string>> => {
    const csv = await statsCommand(socket, "show stat");
    const states: Record<string, string> = {};
    for (const row of csv.split("\n").slice(1)) {
      const f = row.split(",");
      if (f.length > 17 && f[1] !== "FRONTEND" && f[1] !== "BACKEND") states[`${f[0]}/${f[1]}`] = f[17]!;
    }
    return states;
  };
  const stop = async () => {
    proc.kill("SIGTERM");
    await proc.exited;
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (proc.exitCode !== null) {
      await stop();
      throw new Error(`haproxy exited (${proc.exitCode}): ${out.trim()}`);
    }
    const states = await servers().catch(() => ({}) as Record<string, string>);
    const checked = Object.entries(states).filter(([k]) => !k.startsWith("comfy_prompts") && !k.startsWith("comfy_clients"));
    if (checked.length > 0 && checked.every(([, s]) => s === "UP")) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`haproxy's servers not all UP within ${timeoutMs} ms: ${JSON.stringify(states)} ${out.trim()}`);
    }
    await Bun.sleep(20);
  }
  return { ollama: `http://127.0.0.1:${listen.ollama}`, comfy: `http://127.0.0.1:${listen.comfy}`, servers, command: (line) => statsCommand(socket, line), output: () => out, stop };
}
