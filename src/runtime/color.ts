/**
 * Whether to put ANSI colour into output: one rule for the log, the help text and the demo, so a
 * pipe, a file or a service log never collects escape codes. Following https://no-color.org and
 * Node's precedence: FORCE_COLOR (any value but "0" or "false") wins, then NO_COLOR (any
 * non-empty value) and TERM=dumb switch colour off, else colour only on a terminal.
 */
type Env = Readonly<Record<string, string | undefined>>;

export function useColor(stream: { isTTY?: boolean }, env: Env = process.env): boolean {
  const force = env.FORCE_COLOR;
  if (force !== undefined) return force !== "0" && force.toLowerCase() !== "false";
  if (env.NO_COLOR) return false;
  if (env.TERM === "dumb") return false;
  return stream.isTTY === true;
}

const ANSI_SGR = /\x1b\[[0-9;]*m/g;

/** Text without colour codes, for output produced by a library that decides colour on its own. */
export function stripColor(text: string): string {
  return text.replace(ANSI_SGR, "");
}
