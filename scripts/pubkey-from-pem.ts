/**
 * The raw 32-byte Ed25519 public key, base64, from a PEM key (private or public) — the value
 * src/update/pubkey.ts embeds. Same bytes as
 * `openssl pkey -in private.pem -pubout -outform DER | tail -c 32 | base64`.
 *
 *   bun scripts/pubkey-from-pem.ts private.pem        (or: … < public.pem)
 */
import { createPublicKey } from "node:crypto";
import * as fs from "node:fs";

export function publicKeyFromPem(pem: string): string {
  const key = createPublicKey(pem);
  if (key.asymmetricKeyType !== "ed25519") {
    throw new Error(`expected an Ed25519 key, got ${key.asymmetricKeyType ?? "an unknown key type"}`);
  }
  const { x } = key.export({ format: "jwk" });
  if (!x) throw new Error("the key has no public part");
  return Buffer.from(x, "base64url").toString("base64");
}

if (import.meta.main) {
  const file = process.argv[2];
  const pem = fs.readFileSync(file ?? 0, "utf8");
  console.log(publicKeyFromPem(pem));
}
