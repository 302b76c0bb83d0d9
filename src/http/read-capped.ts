/**
 * A request body read whole, but never more than `limit` bytes: counted as it arrives, so a body
 * without Content-Length (chunked) is cut at the limit instead of being read in full first.
 */
export async function readCapped(req: Request, limit: number): Promise<Uint8Array | undefined> {
  const declared = Number(req.headers.get("content-length") ?? NaN);
  if (declared > limit) return undefined;
  if (req.body === null) return new Uint8Array(0);
  const parts: Uint8Array[] = [];
  let size = 0;
  const reader = req.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > limit) {
      await reader.cancel().catch(() => {});
      return undefined;
    }
    parts.push(value);
  }
  return Buffer.concat(parts);
}
