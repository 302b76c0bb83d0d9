/** Facts about how this process was started. */

/** True inside a `bun build --compile` executable, whose entry lives in Bun's virtual filesystem. */
export function isCompiled(argv1: string | undefined = process.argv[1]): boolean {
  return !!argv1 && (argv1.startsWith("/$bunfs/") || /^[A-Za-z]:[\\/]~BUN[\\/]/.test(argv1));
}

/** The user's arguments, without the runtime and the script. */
export function userArgs(argv: readonly string[] = process.argv): string[] {
  return argv.slice(2);
}

/**
 * The program to re-run ourselves: the executable alone when compiled, the runtime plus the
 * script when run from source.
 */
export function selfCommand(argv: readonly string[] = process.argv, execPath = process.execPath): string[] {
  return isCompiled(argv[1]) ? [execPath] : [execPath, argv[1]!];
}
