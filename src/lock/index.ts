export { GpuLock } from "./gpu-lock.ts";
export type { GpuLockOptions, GpuState, ImageLease, Lease, LeaseKind, LockEvent, LockSnapshot } from "./types.ts";
