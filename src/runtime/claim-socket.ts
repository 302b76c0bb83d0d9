/**
 * The real ClaimSocket (card-claim.ts), per system:
 *
 * - Linux: an abstract Unix socket (`\0gpu-turnstile/<hash>`). It has no file, so systemd's
 *   PrivateTmp= and DynamicUser= (another /tmp, another user) do not hide it from a copy a user
 *   starts by hand; it lives as long as the process does. It is scoped to the network namespace:
 *   a copy in a container with its own network does not see one on the host. The unit's
 *   RestrictAddressFamilies= keeps AF_UNIX for it.
 * - Windows: a named mutex `Global\gpu-turnstile-<hash>` (windows-mutex.ts), one per machine across
 *   sessions (the service's and the desktop's), closed by Windows when its process ends; a named
 *   pipe (`\\.\pipe\gpu-turnstile-<hash>`) beside it carries the holder's line. A user may not
 *   open a mutex the service (LocalSystem) created: that too means taken.
 * - Elsewhere (macOS from source): a socket file in the temporary directory; one left behind by a
 *   killed holder (nobody accepts on it) is removed and claimed again.
 */
import type { Socket } from "bun";
import type { ClaimSocket, ClaimSystem, HeldAddress } from "./card-claim.ts";
import { MAX_HOLDER_LINE } from "./card-claim.ts";

/** A holder that does not answer within this is reported as unknown. */
const ASK_TIMEOUT_MS = 1000;
/** A peer that connected is dropped after this, whether or not it read the line. */
const PEER_TIMEOUT_S = 5;

/** The naming this process's system uses. */
export function thisSystem(): ClaimSystem {
  return process.platform === "linux" ? "linux" : process.platform === "win32" ? "win32" : "other";
}

export function claimSocket(system: ClaimSystem): ClaimSocket {
  return system === "win32" ? namedPipes() : bunSocket(system);
}

/** Linux and elsewhere: Bun's own sockets (no node:net to load at every start). */
function bunSocket(system: ClaimSystem): ClaimSocket {
  const listen = (address: string, answer: () => string): HeldAddress => {
    const server = Bun.listen<undefined>({
      unix: address,
      socket: {
        // Ending the socket here, in open, makes the peer's connect fail (Bun 1.4.4): the peer
        // closes once it has the line, and the timeout drops one that does not.
        open(s) {
          s.timeout(PEER_TIMEOUT_S);
          s.write(answer());
        },
        data() {},
        timeout: (s) => void s.end(),
        error() {},
      },
    });
    server.unref();
    return { release: () => server.stop(true) };
  };
  return {
    async listen(address, answer) {
      try {
        return listen(address, answer);
      } catch (err) {
        if (errorCode(err) !== "EADDRINUSE") throw err;
        if (system === "linux" || (await bunAsk(address)) !== undefined) return "taken";
      }
      // A socket file nobody accepts on: its holder was killed. (Two starts racing here could
      // both claim it: this fallback is for systems we do not build for.)
      const { rmSync } = await import("node:fs");
      rmSync(address, { force: true });
      return listen(address, answer);
    },
    ask: bunAsk,
  };
}

function bunAsk(address: string): Promise<string | undefined> {
  return new Promise((resolve) => {
    let text = "";
    let socket: Socket<undefined> | undefined;
    const done = () => {
      clearTimeout(timer);
      socket?.terminate();
      resolve(text.length > 0 ? text : undefined);
    };
    const timer = setTimeout(done, ASK_TIMEOUT_MS);
    Bun.connect<undefined>({
      unix: address,
      socket: {
        open: (s) => void (socket = s),
        data(_s, bytes) {
          text += Buffer.from(bytes).toString("utf8");
          if (text.includes("\n") || text.length >= MAX_HOLDER_LINE) done();
        },
        end: done,
        close: done,
        error: done,
      },
    }).catch(done);
  });
}

/**
 * Windows: a `Global\` mutex decides (windows-mutex.ts); the named pipe beside it, through node:net
 * (Bun.listen does not speak pipes), only carries the holder's line to a refused copy.
 */
function namedPipes(): ClaimSocket {
  return {
    async listen(address, answer) {
      const { claimMutex } = await import("./windows-mutex.ts");
      const mutex = claimMutex(address.slice(address.lastIndexOf("\\") + 1));
      if (mutex === "taken") return "taken";
      // The mutex is ours: a pipe that cannot be opened only costs a refused copy its holder's line.
      const pipe = await listenPipe(address, answer).catch(() => undefined);
      return {
        release() {
          pipe?.release();
          mutex.release();
        },
      };
    },
    async ask(address) {
      const net = await import("node:net");
      return new Promise((resolve) => {
        let text = "";
        const c = net.connect({ path: address });
        const done = () => {
          clearTimeout(timer);
          c.destroy();
          resolve(text.length > 0 ? text : undefined);
        };
        const timer = setTimeout(done, ASK_TIMEOUT_MS);
        c.on("data", (d: Buffer) => {
          text += d.toString("utf8");
          if (text.includes("\n") || text.length >= MAX_HOLDER_LINE) done();
        });
        c.on("end", done);
        c.on("error", done);
      });
    },
  };
}

async function listenPipe(address: string, answer: () => string): Promise<HeldAddress> {
  const net = await import("node:net");
  return new Promise((resolve, reject) => {
    const server = net.createServer((c) => {
      c.on("error", () => {});
      c.setTimeout(PEER_TIMEOUT_S * 1000, () => c.destroy());
      c.end(answer());
    });
    server.once("error", reject);
    server.listen({ path: address }, () => {
      server.unref();
      resolve({ release: () => void server.close() });
    });
  });
}

function errorCode(err: unknown): string | undefined {
  const c = (err as { code?: unknown } | null)?.code;
  return typeof c === "string" ? c : undefined;
}
