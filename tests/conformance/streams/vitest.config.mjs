// The conformance suite against a running ledger: `DS_BASE_URL` and `DS_TOKEN` come from the
// pytest test that started the server (tests/acceptance/test_durable_streams_conformance.py).
import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["conformance.test.mjs"],
    setupFiles: ["./auth-setup.mjs"],
    testTimeout: 30000,
    hookTimeout: 30000,
  },
})
