/**
 * The demo's live timeline: one line per event, with the time since the start, who it is about,
 * and what happened — readable in a terminal, plain when NO_COLOR is set or output is not a TTY.
 */
export type Tone = "gpu" | "llm" | "image" | "wait" | "warn" | "ok" | "dim" | "plain";

const COLORS: Record<Tone, string> = {
  gpu: "\x1b[1;35m",
  llm: "\x1b[36m",
  image: "\x1b[33m",
  wait: "\x1b[34m",
  warn: "\x1b[1;31m",
  ok: "\x1b[32m",
  dim: "\x1b[2m",
  plain: "",
};
const RESET = "\x1b[0m";

export class Timeline {
  private t0 = performance.now();
  readonly lines: string[] = [];

  constructor(
    private readonly out: (s: string) => void,
    private readonly color: boolean,
  ) {}

  elapsed(): number {
    return performance.now() - this.t0;
  }

  /** Counts from now: a workload scheduled on this clock starts when its setup is done, not during it. */
  restart(): void {
    this.t0 = performance.now();
  }

  event(who: string, what: string, tone: Tone = "plain"): void {
    const t = `+${(this.elapsed() / 1000).toFixed(2).padStart(6)}s`;
    const plain = `${t}  ${who.padEnd(14)} ${what}`;
    this.lines.push(plain);
    if (!this.color || tone === "plain") return this.out(plain + "\n");
    this.out(`${COLORS.dim}${t}${RESET}  ${COLORS[tone]}${who.padEnd(14)}${RESET} ${COLORS[tone]}${what}${RESET}\n`);
  }

  text(s: string, tone: Tone = "plain"): void {
    this.lines.push(s);
    this.out(this.color && tone !== "plain" ? `${COLORS[tone]}${s}${RESET}\n` : `${s}\n`);
  }
}

export const secs = (ms: number) => `${(ms / 1000).toFixed(2)}s`;
export const gib = (b: number) => `${(b / 1024 ** 3).toFixed(1)} GiB`;
