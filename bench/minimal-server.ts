/** Reference for the start-up scenario: the smallest compiled Bun server that answers /healthz. */
Bun.serve({
  hostname: "127.0.0.1",
  port: Number(process.env.PORT ?? 0),
  fetch: () => Response.json({ state: "idle" }),
});
