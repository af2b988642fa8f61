// Package redisstore is quotagate's shared store: a limit.Store on Redis
// (standalone, Sentinel or Cluster) through github.com/redis/rueidis, for a
// fleet of replicas that must draw on one allowance, exactly.
//
// # One round trip per decision
//
// Each decision is one EVALSHA (EVAL the first time a node lacks the script)
// of a Lua script per algorithm. The scripts transcribe limit.Op.Apply line by
// line, so the Redis and memory stores give identical decisions, field by
// field (tested over random sequences of 10 000+ steps per algorithm on a
// real server, a real Cluster and miniredis). Inside the script:
//
//   - the clock is read once: Redis TIME by default, so replicas need no clock
//     synchronisation; or a caller's clock (WithClock) passed as an argument;
//   - the state of one (bucket, identity) is one string under op.Key (its
//     integers packed, see scripts.go), whose first "{...}" is the Cluster
//     hash tag (see DESIGN.md, "Store keys");
//   - a denied request writes nothing; an allowed one writes the new state
//     and its time to live (Result.TTLMS) in one SET ... PX (PXAT on server
//     time), so no sequence of calls, crashes or dropped connections can
//     leave a key without one. A key found without a TTL (written by
//     something else) gets one even on a denial.
//
// All integers stay below 2^53, where Lua's doubles are exact; limit.New
// rejects policies that could exceed it.
//
// # Clients
//
// New takes a rueidis.Client the caller built and owns. NewFromURL (and
// ParseURL + Dial) builds one from a URL with the options that matter for a
// limiter: DisableCache (no client-side caching), AlwaysPipelining (a
// timed-out call does not close the shared connection), auto-pipelining left
// on, 1 s dial and write timeouts, and a reconnect backoff: an address whose
// last connection got no answer is dialled at most once per
// ReconnectInterval (1 s), so a hung server costs one new connection per
// second, not one per request. Sentinel URLs give the sentinels the same
// dialer and TLS settings. Calls are bounded by the engine's store timeout
// (limit.WithStoreTimeout, default 100 ms) through their context.
//
// # Failure
//
// Any Redis failure is a Take error, never a panic or a hang past the
// context's deadline; the engine then applies the policy's FailureMode
// (FailOpen, FailLocal, FailClosed). A Store built by Dial or NewFromURL
// while Redis is down starts anyway and connects in the background; until
// then Take fails at once with ErrNotConnected. Counting resumes as soon as
// Redis answers. A call whose deadline expires may still have been counted
// by Redis.
//
// Requirements: Redis 6.2 or later (SET ... PXAT; scripts replicated by
// effects); tested on Redis 7.0.15 and miniredis v2.40.
package redisstore
