/** What an install or remove did, line by line, for a human; and the exit code it ends with. */

export type ReportLevel = "info" | "warn" | "error";

export interface ReportLine {
  level: ReportLevel;
  text: string;
}

export interface Outcome {
  /** 0 = done; 1 = failed (not root, a command failed, ...) */
  exitCode: number;
  lines: ReportLine[];
}

/** Receives each line as it happens, so a slow `systemctl start` does not hide what came before. */
export type ReportSink = (line: ReportLine) => void;

export class Report {
  readonly lines: ReportLine[] = [];
  private failed = false;

  constructor(private readonly sink?: ReportSink) {}

  info(text: string): void {
    this.add({ level: "info", text });
  }

  warn(text: string): void {
    this.add({ level: "warn", text });
  }

  /** Records an error; the outcome's exit code becomes 1. */
  error(text: string): void {
    this.failed = true;
    this.add({ level: "error", text });
  }

  get ok(): boolean {
    return !this.failed;
  }

  done(): Outcome {
    return { exitCode: this.failed ? 1 : 0, lines: this.lines };
  }

  private add(line: ReportLine): void {
    this.lines.push(line);
    this.sink?.(line);
  }
}

/** One line per ReportLine, errors and warnings marked, for printing or a log file. */
export function formatLines(lines: readonly ReportLine[]): string {
  return lines.map((l) => (l.level === "info" ? l.text : `${l.level === "warn" ? "warning" : "error"}: ${l.text}`)).join("\n");
}
