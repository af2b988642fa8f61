// Package redisstore is quotagate's shared store: a limit.Store on Redis
// (standalone, Sentinel or Cluster) through github.com/redis/rueidis, for a
// fleet of replicas that must draw on one allowance, exactly.
//
// # One round trip per decision, at most
//
// Each decision is one EVALSHA (EVAL the first time a node lacks the script)
// of one Lua script for every algorithm, or, under load, a share of one:
// concurrent Takes on a standalone or Sentinel client are combined into one
// call of a batch script that decides them one after the other (group
// commit, see Store). The script handles Ops of up to limit.MaxQuotas
// quotas (all or nothing) and for refunds. The script transcribes the
// admission test and the state updates of limit.Op.Apply line by line; it
// returns the states it read, and Take computes the Result with
// limit.Op.Apply itself, so the Redis and memory stores give identical
// decisions, field by field (tested over random sequences of 10 000+ steps
// per algorithm, with several quotas, refunds and clock steps, on a real
// server, a real Cluster and miniredis). Inside the script:
//
//   - the clock is read once: Redis TIME by default, so replicas need no clock
//     synchronisation; or a caller's clock (WithClock) passed as an argument;
//   - the states are read with one GET (MGET for several quotas); each is one
//     string of five packed integers under its quota's key, whose first
//     "{...}" is the Cluster hash tag the keys of one Op share (see
//     DESIGN.md, "Store keys");
//   - a denied request only reads; an admitted one writes each state, with
//     SETRANGE over the 40 bytes (which keeps the key's deadline) while
//     that deadline covers the state's life and SET ... PXAT (PX on a caller's clock) when it must move, so every key
//     the store writes has a time to live, within the policy's bound. The
//     one write a denial makes is a state the clock has fallen far behind (a
//     backward clock step), normalized as limit.Op.Apply says.
//
// All integers stay below 2^53, where Lua's doubles are exact; limit.New
// rejects policies that could exceed it. Per call the store allocates once
// (rueidis' reply), so under load less than once per decision; a decision
// costs Redis no more than the leanest peer's while reading the server's
// clock (see bench/redispeers).
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
// dialer and TLS settings. Calls are bounded by the Store's own timeout
// (WithTimeout, default 100 ms: see package guard) through their context.
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
// Requirements: Redis 6.2 or later (SET ... PXAT; scripts
// replicated by effects); tested on Redis 7.0.15 and miniredis v2.40 (whose
// Lua lacks the struct library: the script then packs in plain Lua).
package redisstore
