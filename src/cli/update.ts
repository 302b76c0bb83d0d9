/** force-update. */
export async function forceUpdateCommand(_opts: { configPath?: string }): Promise<number> {
  process.stderr.write("gpu-turnstile: force-update is not built yet\n");
  return 1;
}
