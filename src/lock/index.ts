export { GpuLock } from "./gpu-lock.ts";
export type { GpuLockOptions, GpuState, ImageClient, LineEntry, LlmLineEntry, ImageLease, Lease, LeaseKind, LockEvent, LockSnapshot } from "./types.ts";
