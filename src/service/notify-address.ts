/**
 * The pure half of sd_notify: where to send (NOTIFY_SOCKET → a sockaddr_un) and how often to
 * ping the watchdog (WATCHDOG_USEC / WATCHDOG_PID). No I/O, so it is tested without sockets.
 */

const AF_UNIX = 1;
/** sizeof(sockaddr_un.sun_path) on Linux */
const SUN_PATH_MAX = 108;
const SUN_PATH_OFFSET = 2;

export interface SockAddr {
  /** the sockaddr_un bytes: sa_family (u16, little endian on every Linux Bun runs on) + path */
  bytes: Uint8Array;
  /**
   * The exact length to pass to sendto(). For an abstract socket it must not include any
   * padding: the kernel takes every byte up to addrlen as the name, NULs included.
   */
  length: number;
}

/**
 * NOTIFY_SOCKET → sockaddr_un. `/path` is a filesystem socket, `@name` an abstract one (leading
 * NUL, no terminator). Anything else (relative paths, `vsock:` from newer systemd) is refused
 * with a reason, as sd_notify does.
 */
export function notifySockAddr(value: string): SockAddr | { error: string } {
  const abstract = value.startsWith("@");
  if (!abstract && !value.startsWith("/")) {
    return { error: `NOTIFY_SOCKET=${value}: only absolute paths and @abstract names are supported` };
  }
  const name = new TextEncoder().encode(abstract ? value.slice(1) : value);
  // A path needs its terminating NUL, an abstract name its leading one: 107 bytes either way.
  const room = SUN_PATH_MAX - 1;
  if (name.length === 0 || name.length > room) {
    return { error: `NOTIFY_SOCKET=${value}: name must be 1..${room} bytes` };
  }
  const bytes = new Uint8Array(SUN_PATH_OFFSET + SUN_PATH_MAX);
  new DataView(bytes.buffer).setUint16(0, AF_UNIX, true);
  if (abstract) {
    bytes[SUN_PATH_OFFSET] = 0;
    bytes.set(name, SUN_PATH_OFFSET + 1);
    return { bytes, length: SUN_PATH_OFFSET + 1 + name.length };
  }
  bytes.set(name, SUN_PATH_OFFSET);
  return { bytes, length: SUN_PATH_OFFSET + name.length + 1 };
}

/**
 * How often to send WATCHDOG=1: half of WATCHDOG_USEC (systemd's advice), in ms; undefined when
 * the watchdog is off or meant for another process (WATCHDOG_PID set to a different pid — our
 * parent exec'd us without clearing it, say). This is sd_watchdog_enabled()'s rule.
 */
export function watchdogIntervalMs(env: Readonly<Record<string, string | undefined>>, pid: number): number | undefined {
  const usec = env.WATCHDOG_USEC;
  if (usec === undefined || !/^\d+$/.test(usec) || Number(usec) === 0) return undefined;
  const forPid = env.WATCHDOG_PID;
  if (forPid !== undefined && forPid !== "" && forPid !== String(pid)) return undefined;
  return Math.max(1, Math.floor(Number(usec) / 2000));
}

/** STATUS= ends at the first newline: a datagram's lines are separate assignments. */
export function statusMessage(text: string): string {
  return `STATUS=${text.replace(/[\r\n]+/g, " ")}`;
}

export interface Notifier {
  /** true when NOTIFY_SOCKET is set and usable */
  readonly enabled: boolean;
  /** why a set NOTIFY_SOCKET cannot be used; undefined when all is well or it is unset */
  readonly problem?: string;
  /** send WATCHDOG=1 this often (half of WATCHDOG_USEC); undefined = no watchdog */
  readonly watchdogIntervalMs?: number;
  /** READY=1: call once every listener is bound */
  ready(): boolean;
  /** WATCHDOG=1 */
  watchdog(): boolean;
  /** STOPPING=1: graceful shutdown has begun */
  stopping(): boolean;
  /** STATUS=<text>, shown by `systemctl status` */
  status(text: string): boolean;
  /** any raw message, e.g. "EXTEND_TIMEOUT_USEC=…" */
  send(message: string): boolean;
  close(): void;
}

/** A notifier that sends nothing: NOTIFY_SOCKET unset, or unusable (then `problem` says why). */
export function disabledNotifier(problem?: string): Notifier {
  return {
    enabled: false,
    ...(problem ? { problem } : {}),
    ready: () => false,
    watchdog: () => false,
    stopping: () => false,
    status: () => false,
    send: () => false,
    close: () => {},
  };
}
