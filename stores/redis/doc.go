// Package redisstore is quotagate's shared store: a limitstore.Store on Redis
// (standalone, Sentinel or Cluster) through github.com/redis/rueidis, for a
// fleet of replicas that must draw on one allowance, exactly.
//
// # One round trip per decision, at most
//
// Each decision is one EVALSHA (EVAL the first time a node lacks the script)
// of one Lua script for every algorithm, or, under load, a share of one:
// concurrent Takes on a standalone or Sentinel client are combined into one
// call of a batch script that decides them one after the other (group
// commit, see Store). The script handles Ops of up to limitstore.MaxQuotas
// quotas (all or nothing) and for refunds. The script transcribes the
// admission test and the state updates of limitstore.Op.Apply line by line; it
// returns the states it read, and Take computes the Result with
// limitstore.Op.Apply itself, so the Redis and memory stores give identical
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
//     SETRANGE over the 40 bytes (which keeps the key's deadline; PTTL
//     tells a key that lost it, PERSIST from outside, and PEXPIREAT gives
//     it back; a flight of 8 keys or more asks INFO keyspace once instead,
//     and sends no PTTL when no key of the server lacks a deadline)
//     while that deadline covers the state's life and SET
//     ... PXAT (PX on a caller's clock) when it must move, so every key the
//     store writes has a time to live after any write, within the policy's
//     bound: a fixed window's the end of the window plus 1 s, a sliding
//     window's the end of the next window, a token bucket's the time until
//     it is full plus at most 1 s. The one write a denial makes is a state
//     the clock has fallen far behind (a backward clock step), normalized as
//     limitstore.Op.Apply says.
//
// Peek and Reset (limitstore.Resetter, for limit.Limiter's Peek and Reset):
// a Peek is one call of lua/peek.lua, which reads TIME and MGETs the states
// and writes nothing (Take then runs limitstore.Op.Apply on them as for a
// decision); a Reset is one call of lua/reset.lua on the identity's keys,
// atomic and on one Cluster slot (they share its hash tag): each live state
// becomes the empty state of the next epoch (48 bytes, its expiry and TTL
// kept), so that a refund of a charge taken before the Reset gives nothing
// back, and every other record is deleted. Both go through the Store's
// guard.
// A Reset is then announced on the Pub/Sub channel "quotagate:resets"; every
// guarded Store subscribes there (one subscription on its client, ended by
// Close) and drops its deny cache's denials of the announced keys, so a
// Reset through one replica is not undone by another's cache. An
// announcement missed while a subscription reconnects leaves those
// denials to end at their own Retry-After.
//
// Blocks (limit.Policy.BlockFor, limitstore.Op.Block): an Op with a block
// rule, or its Peek, is one call of lua/block.lua (after lua/prelude.lua),
// never batched: it reads the quotas' states and the identity's block
// record in one MGET, decides nothing while a block is in force, and
// otherwise decides the quotas as take.lua's general path and, on a
// denial, writes the new record (16 bytes, its deadline BlockMax after the
// block ends), all in one atomic step on the identity's slot; Take then
// runs limitstore.Op.ApplyBlock on what it read. The guard's deny cache
// answers the blocked identity until the block ends. With a lease
// (limit.Policy.CountStatus and BlockFor) the same call reads and writes
// the identity's unsettled charges too (24 bytes, their own key; a denial
// begins no block while one is unsettled), and the Refund that settles a
// charge is a block.lua call of its own (never batched).
//
// All integers stay below 2^53, where Lua's doubles are exact; limit.New
// rejects policies that could exceed it. Per call the store allocates once
// (rueidis' reply), so under load less than once per decision; a decision
// costs Redis no more than the leanest peer's while reading the server's
// clock (see bench/redispeers).
//
// # The scripts, by hand
//
// The Lua is in three files: lua/prelude.lua holds what both scripts share
// (the codec, the stored value's layout, the algorithm), lua/take.lua
// decides one Op, lua/batch.lua a flight of Ops (group commit). The store
// sends each script as the prelude followed by its file (scripts.go), so
// load them joined, as the store does: cat the two files into
// redis-cli -x, which takes the last argument from stdin, byte for byte, so
// the SHA-1 it prints is the store's. The head of each file documents its
// KEYS, ARGV and reply. take.lua also takes the integers of its ARGV[1] as
// decimal arguments, one each, so the joined file runs with redis-cli
// --eval (a fixed window of 10 per minute, phase 0, cost 1, on the server's
// clock; the reply's bytes are printed as they are when stdout is not a
// terminal):
//
//	cat stores/redis/lua/prelude.lua stores/redis/lua/take.lua > /tmp/take.lua
//	redis-cli --eval /tmp/take.lua '{demo}k' , 0 1 1 10 60000 0 | od -An -v -t d8 -w8
//
// batch.lua takes "ops" as ARGV[1] and then one Op per argument, take.lua's
// integers in decimal separated by spaces (no refunds), each Op's keys the
// next KEYS; four Ops of 3 per minute on one key, the fourth denied:
//
//	cat stores/redis/lua/prelude.lua stores/redis/lua/batch.lua > /tmp/batch.lua
//	redis-cli --eval /tmp/batch.lua '{demo}a' '{demo}a' '{demo}a' '{demo}a' , ops \
//	  '0 1 1 3 60000 0' '0 1 1 3 60000 0' '0 1 1 3 60000 0' '0 1 1 3 60000 0' | od -An -c | head -1
//
// What the store sends is packed (bytes that a command-line argument cannot
// hold: a NUL byte ends it); send that on redis-cli's stdin, where "\xHH"
// inside double quotes is a byte.
// take.lua's packed ARGV[1] is 8-byte little-endian integers: now in Unix
// ms (0: the server's TIME), cost, then per quota the algorithm (0 sliding
// window, 1 fixed window, 2 token bucket), limit, window ms, and phase ms
// or burst; x8 writes integers so. The same call as above, packed:
//
//	x8() { for v; do for s in 0 8 16 24 32 40 48 56; do
//	  printf '\\x%02x' $(( (v >> s) & 255 )); done; done; }
//	cd stores/redis
//	sha=$(cat lua/prelude.lua lua/take.lua | redis-cli -x SCRIPT LOAD)
//	printf 'EVALSHA %s 1 {demo}k "%s"\n' "$sha" "$(x8 0 1 1 10 60000 0)" |
//	  redis-cli | od -An -v -t d8 -w8
//
// od prints the reply as integers: the clock reading (negative: denied),
// then, from the second call on, the state the call read as stored
// (window index, count, previous count, expiry, the key's deadline); its
// last line is redis-cli's newline. batch.lua takes the flight's keys, its Ops'
// heads in ARGV[1] (per Op: its quotas, the index in ARGV of its argument,
// the index in KEYS of each key, a 4-byte phase) and the arguments from
// ARGV[2] on (a window Op's without its phase). Two Ops as above, on
// {demo}a and {demo}b (the reply's layout is in batch.lua's head):
//
//	sha=$(cat lua/prelude.lua lua/batch.lua | redis-cli -x SCRIPT LOAD)
//	heads='\x01\x02\x01\x00\x00\x00\x00\x01\x02\x02\x00\x00\x00\x00'
//	printf 'EVALSHA %s 2 {demo}a {demo}b "%s" "%s"\n' "$sha" "$heads" \
//	  "$(x8 0 1 1 10 60000)" | redis-cli --no-raw
//
// A Lua error names a line of the joined text: the prelude's lines first.
// TestScriptsByHand runs both scripts with EVAL and arguments packed so.
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
// A Store reads every node's maxmemory-policy and loads its scripts there
// when it gets its client (at most 2 s), so its first decision is one
// EVALSHA on an open connection, decided by Redis.
//
// # Cluster
//
// On a Cluster client the Store keeps one guard (timeout, circuit breaker,
// deny cache) per master and its own map of the hash slots to the masters
// (CLUSTER SLOTS, read again when a decision finds it a second old, and at
// once while a master's breaker is open, on a goroutine that ends with the
// reading); each decision goes to its key's master through the cluster
// client's connection to that node. A master that dies or hangs opens the
// breaker, and the failure mode, for its own slots only: the identities on
// the other masters keep being decided by Redis. Once its replica is
// promoted the map moves its slots to the new master within about 100 ms,
// whether or not they had traffic. Run the Cluster with
// cluster-require-full-coverage no: with the default (yes), the live
// masters refuse every command (CLUSTERDOWN) from the moment the dead
// master is marked failed until its replica takes over.
//
// # Eviction
//
// Every key the Store writes has a time to live, so under any allkeys-* or
// volatile-* maxmemory-policy Redis may evict a limited client's key, and
// that client starts again with a fresh quota (volatile-* evicts the
// limiter's keys first: they are the ones with a TTL). The Store logs a
// warning once and reports the policy in EvictionPolicy (and, through
// promlimit.NewEvictionPolicyCollector, the quotagate_store_may_evict
// gauge). The safe setups: maxmemory-policy noeviction, or a Redis of the
// limiter's own whose maxmemory it never reaches. Under noeviction a full
// Redis answers the script's writes OOM: each decision then follows its
// policy's FailureMode (through an HTTP adapter the handler's answer with
// FailOpen, a 503 with FailClosed; never a 500), and after 5 such answers
// the breaker opens until a probe succeeds.
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
// Requirements: Redis 6.2 or later (SET ... PXAT is the newest command
// option the scripts use; scripts replicated by effects, the default since
// 5.0); tested on Redis 7.0.15 and miniredis v2.40 (whose
// Lua lacks the struct library: the script then packs in plain Lua).
package redisstore
