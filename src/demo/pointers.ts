/**
 * What the demo points at: the status page and `status` for each turnstile it runs, and, with
 * `demo --sims-only`, the command that puts a turnstile in front of the simulators. Printed as
 * this program is run here, so a line can be pasted as it is.
 */
import { basename, isAbsolute, relative } from "node:path";
import { isCompiled } from "../runtime/compiled.ts";

/**
 * This program as a shell would run it again: the executable when compiled; from a checkout,
 * `npx bun` and the script (relative when under the working directory, as `npm run demo` runs it).
 */
export function thisProgram(argv: readonly string[] = process.argv, execPath = process.execPath, cwd = process.cwd()): string {
  if (isCompiled(argv[1])) return quote(execPath);
  const script = argv[1] ?? "src/main.ts";
  const rel = relative(cwd, script);
  const shown = rel && !rel.startsWith("..") && !isAbsolute(rel) ? rel : script;
  return `${basename(execPath).startsWith("bun") ? "npx bun" : quote(execPath)} ${quote(shown)}`;
}

const quote = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replaceAll("'", "'\\''")}'`);

/** The page and the command that show one turnstile live (`base`: its listener, http://host:port). */
export function watchLines(base: string, program = thisProgram(), card = ""): string[] {
  const on = card ? ` (${card})` : "";
  return [`  status page${on}:   ${base}/turnstile/`, `  in a terminal${on}: ${program} status --watch --url ${base}`];
}
