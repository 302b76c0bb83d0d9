export async function runDemo(_opts: { once: boolean; withoutTurnstile: boolean }): Promise<number> {
  process.stderr.write("gpu-turnstile: demo is not built yet\n");
  return 1;
}
