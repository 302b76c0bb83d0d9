/** Scenario 3: the 8 MiB /view download from the ComfyUI side, closed-loop. */
import { runLoad, type LoadResult } from "../lib/load.ts";
import type { SubjectName, Target } from "./types.ts";

export interface DownloadRow extends LoadResult {
  subject: SubjectName;
  mibPerSec: number;
}

export async function download(
  targets: Target[],
  opts: { concurrency: number[]; seconds: number; path: string; wrk: string | undefined; note: (s: string) => void },
): Promise<DownloadRow[]> {
  const rows: DownloadRow[] = [];
  for (const c of opts.concurrency) {
    for (const t of targets) {
      const url = `${t.url}${opts.path}`;
      await runLoad({ url, connections: c, seconds: 1 }, opts.wrk);
      const r = await runLoad({ url, connections: c, seconds: opts.seconds }, opts.wrk);
      const mibPerSec = r.bytesPerSec / 1024 / 1024;
      opts.note(`  c=${String(c).padStart(2)} ${t.subject.padEnd(9)} ${mibPerSec.toFixed(0).padStart(6)} MiB/s  ${r.rps.toFixed(1)} downloads/s${r.errors ? `  errors ${r.errors}` : ""}`);
      rows.push({ subject: t.subject, ...r, mibPerSec });
    }
  }
  return rows;
}
