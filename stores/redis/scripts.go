package redisstore

import (
	_ "embed"

	"github.com/redis/rueidis"
)

// The store's two scripts are plain Lua files beside this one, embedded as
// they are: the file is the script Redis runs, byte for byte, so a
// maintainer can read it, load it with redis-cli and run it by hand (see
// the package doc). Each file's head documents its KEYS, ARGV and reply;
// store.go and batch.go encode the arguments and decode the replies.
//
//   - lua/take.lua decides one Op (up to limitstore.MaxQuotas quotas of any
//     algorithm, or a refund): one EVALSHA per decision.
//   - lua/batch.lua decides a flight of Ops one after the other, each as
//     take.lua would (group commit, see batch.go).
//
// Both pack their integers with the struct library of the server's Lua
// (Redis, Valkey) and fall back to plain Lua where there is none
// (miniredis): the script detects it once at its top, so one text serves
// every server.

// takeSource is lua/take.lua: the script of one decision.
//
//go:embed lua/take.lua
var takeSource string

// batchSource is lua/batch.lua: the script of a flight of several Ops.
//
//go:embed lua/batch.lua
var batchSource string

// takeScript and batchScript are created once: rueidis sends EVALSHA and
// falls back to EVAL (which also loads the script) on NOSCRIPT, per node.
var (
	takeScript  = rueidis.NewLuaScript(takeSource)
	batchScript = rueidis.NewLuaScript(batchSource)
)
