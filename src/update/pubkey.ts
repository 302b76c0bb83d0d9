// The release signing key's raw 32-byte Ed25519 public key, base64. Empty = this build never
// updates itself. Generated once by the owner (docs/RELEASING.md); release tooling and outside
// checks replace this exact line, so keep the name and the single string constant.
export const PUBLIC_KEY_BASE64 = "";
