/**
 * sd_notify without a child process. Node's dgram and Bun's UDP sockets cannot send to a unix
 * datagram socket, so this calls libc through bun:ffi: socket(AF_UNIX, SOCK_DGRAM|SOCK_CLOEXEC)
 * once, then one sendto() per message. Linux-only: import it with a dynamic import() behind a
 * platform check (index.ts does), so a Windows build never dlopens libc.
 *
 * Every call is a no-op returning false when NOTIFY_SOCKET is unset (interactive runs, Docker)
 * or unusable; `problem` then says why, for one log line at startup.
 */
import { dlopen, read, type Pointer } from "bun:ffi";
import { disabledNotifier, notifySockAddr, statusMessage, watchdogIntervalMs, type Notifier, type SockAddr } from "./notify-address.ts";

export type { Notifier } from "./notify-address.ts";


type Env = Readonly<Record<string, string | undefined>>;

const AF_UNIX = 1;
const SOCK_DGRAM = 2;
const SOCK_CLOEXEC = 0o2000000;
const MSG_NOSIGNAL = 0x4000;

const LIBC_NAMES = ["libc.so.6", "libc.musl-x86_64.so.1", "libc.musl-aarch64.so.1", "libc.so"];

function openLibc() {
  const symbols = {
    socket: { args: ["i32", "i32", "i32"], returns: "i32" },
    sendto: { args: ["i32", "ptr", "u64", "i32", "ptr", "u32"], returns: "i64" },
    close: { args: ["i32"], returns: "i32" },
    __errno_location: { args: [], returns: "ptr" },
  } as const;
  let last: unknown;
  for (const name of LIBC_NAMES) {
    try {
      return dlopen(name, symbols);
    } catch (e) {
      last = e;
    }
  }
  throw last;
}

type Libc = ReturnType<typeof openLibc>;

const disabled = disabledNotifier;

export function createNotifier(env: Env = process.env, pid: number = process.pid): Notifier {
  const socketName = env.NOTIFY_SOCKET;
  if (socketName === undefined || socketName === "") return disabled();
  const addr = notifySockAddr(socketName);
  if ("error" in addr) return disabled(addr.error);
  let libc: Libc;
  try {
    libc = openLibc();
  } catch (e) {
    return disabled(`sd_notify: cannot load libc: ${(e as Error).message}`);
  }
  return new LibcNotifier(libc, addr, watchdogIntervalMs(env, pid));
}

class LibcNotifier implements Notifier {
  readonly enabled = true;
  private fd = -1;
  private closed = false;
  problem?: string;

  constructor(
    private readonly libc: Libc,
    private readonly addr: SockAddr,
    readonly watchdogIntervalMs: number | undefined,
  ) {}

  ready(): boolean {
    return this.send("READY=1");
  }

  watchdog(): boolean {
    return this.send("WATCHDOG=1");
  }

  stopping(): boolean {
    return this.send("STOPPING=1");
  }

  status(text: string): boolean {
    return this.send(statusMessage(text));
  }

  send(message: string): boolean {
    if (this.closed) return false;
    if (this.fd < 0) {
      this.fd = this.libc.symbols.socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (this.fd < 0) {
        this.problem = `sd_notify: socket() failed: errno ${this.errno()}`;
        return false;
      }
    }
    const data = new TextEncoder().encode(message);
    const sent = Number(this.libc.symbols.sendto(this.fd, data, data.length, MSG_NOSIGNAL, this.addr.bytes, this.addr.length));
    if (sent !== data.length) {
      this.problem = `sd_notify: sendto() failed: errno ${this.errno()}`;
      return false;
    }
    return true;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.fd >= 0) this.libc.symbols.close(this.fd);
    this.fd = -1;
    this.libc.close();
  }

  private errno(): number {
    const p = this.libc.symbols.__errno_location() as Pointer | null;
    return p ? read.i32(p, 0) : -1;
  }
}
