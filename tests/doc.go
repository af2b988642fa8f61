// Package tests is quotagate's unpublished test module: scaffolding and
// tests that need real servers or test-only libraries and must not enter
// the module graph of anyone who imports a published quotagate module.
//
//   - redisfault: redis-server processes of a test's own, frozen, slowed,
//     killed and restarted by PID; a delaying TCP proxy.
//   - sentinel: the Sentinel failover test on the servers `make test` starts.
//   - hung: connection behaviour of the Redis store against a frozen server.
//   - faults: the Redis store's protections (timeout, circuit breaker,
//     deny cache) against a slowed, frozen and killed redis-server: the
//     latency bounds, a frozen server under HTTP load, a local store without
//     FailLocal, the deny cache across two replicas, what timed-out calls
//     charge.
//   - clienttest: the HTTP client transport (limitclient) against every
//     adapter's middleware over loopback, run from tests/adapters/*.
//   - adapters/*: each adapter's conformance harness, matrix and own tests;
//     adapters/fiberv3 is a module of its own, so that fiber v3's fasthttp
//     does not replace the one the fiber v2 tests here pin.
//
// scripts/test.sh runs it like every other module (GOWORK=off, -race).
package tests
