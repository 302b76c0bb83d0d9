/** A localhost port nobody listens on, different for each call (it was free a moment ago). */
export function deadPort(): number {
  const s = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = s.port;
  s.stop(true);
  return port;
}
