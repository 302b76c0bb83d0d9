export { GpuLock } from "./gpu-lock.ts";
export type { GpuLockOptions, GpuState, Lease, LeaseKind, LockEvent, LockSnapshot } from "./types.ts";
