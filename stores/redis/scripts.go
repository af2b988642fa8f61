package redisstore

import (
	_ "embed"

	"github.com/redis/rueidis"
)

// The store's two scripts are plain Lua files beside this one, embedded as
// they are, each after the prelude both share: the text sent is the files
// joined, byte for byte, so a maintainer can read them, load them with
// redis-cli and run them by hand (see the package doc). Each file's head
// documents its KEYS, ARGV and reply; store.go and batch.go encode the
// arguments and decode the replies.
//
//   - lua/prelude.lua holds what both share: the codec, the stored value's
//     layout and the algorithm (limitstore.Op.Apply's steps, as functions
//     for the general path, marked copies inline on the straight path).
//   - lua/take.lua decides one Op (up to limitstore.MaxQuotas quotas of any
//     algorithm, or a refund): one EVALSHA per decision.
//   - lua/batch.lua decides a flight of Ops one after the other, each as
//     take.lua would (group commit, see batch.go).
//   - lua/block.lua decides an Op with a block rule (block.go), alone.
//   - lua/peek.lua reads the clock and the states of a Peek (peek.go), and
//     writes nothing; it is sent alone, without the prelude.
//   - lua/reset.lua moves an identity's live states to the next epoch and
//     deletes its other records (peek.go's Reset); sent alone.
//   - lua/acquire.lua and lua/release.lua take and give back the
//     concurrency slots of limit.Concurrency policies (lease.go), each
//     sent alone.
//
// Both pack their integers with the struct library of the server's Lua
// (Redis, Valkey) and fall back to plain Lua where there is none
// (miniredis): the prelude detects it once at its top, so one text serves
// every server.

//go:embed lua/prelude.lua
var preludeSource string

//go:embed lua/take.lua
var takeBody string

//go:embed lua/batch.lua
var batchBody string

//go:embed lua/peek.lua
var peekSource string

//go:embed lua/reset.lua
var resetSource string

// takeSource is the script of one decision: lua/prelude.lua, then
// lua/take.lua. batchSource is the script of a flight of several Ops:
// lua/prelude.lua, then lua/batch.lua. Joined once, at init.
var (
	takeSource  = preludeSource + takeBody
	batchSource = preludeSource + batchBody
)

// takeScript and batchScript are created once: rueidis sends EVALSHA and
// falls back to EVAL (which also loads the script) on NOSCRIPT, per node.
var (
	takeScript  = rueidis.NewLuaScript(takeSource)
	batchScript = rueidis.NewLuaScript(batchSource)
	peekScript  = rueidis.NewLuaScript(peekSource)
	resetScript = rueidis.NewLuaScript(resetSource)
)
