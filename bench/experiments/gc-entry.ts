/**
 * The turnstile's own entry with a full garbage collection every GC_EVERY_MS: shows how much of
 * its RSS is garbage Bun has not collected yet (memory experiment only).
 */
setInterval(() => Bun.gc(true), Number(process.env.GC_EVERY_MS ?? 1000)).unref();
await import("../../src/main.ts");
export {};
