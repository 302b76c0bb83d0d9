export { GpuLock } from "./gpu-lock.ts";
export type { GpuLockOptions, GpuState, ImageClient, LineEntry, ImageLease, Lease, LeaseKind, LockEvent, LockSnapshot } from "./types.ts";
