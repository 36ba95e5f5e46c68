// The suite sends no credentials; the ledger wants a bearer token on every stream request.
// Wrap fetch (before the suite and its client library load) so every request to the server under
// test carries it.
const base = process.env.DS_BASE_URL
const token = process.env.DS_TOKEN
if (!base || !token) {
  throw new Error("DS_BASE_URL and DS_TOKEN must be set")
}

const originalFetch = globalThis.fetch

globalThis.fetch = (input, init = {}) => {
  const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url
  if (!url.startsWith(base)) {
    return originalFetch(input, init)
  }
  const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined))
  if (!headers.has("authorization")) {
    headers.set("authorization", `Bearer ${token}`)
  }
  return originalFetch(input, { ...init, headers })
}
