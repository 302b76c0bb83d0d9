/** install-service / remove-service. */
export async function installService(_opts: { configPath?: string; noCopy: boolean }): Promise<number> {
  process.stderr.write("gpu-turnstile: install-service is not built yet\n");
  return 1;
}
export async function removeService(): Promise<number> {
  process.stderr.write("gpu-turnstile: remove-service is not built yet\n");
  return 1;
}
