package redisstore

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	"github.com/redis/rueidis"
)

// scriptFiles are the store's scripts by file, as the store sends them:
// lua/prelude.lua, then the file; or, alone, the file by itself.
var scriptFiles = map[string]struct {
	body   string       // the embedded text of the file
	source string       // the script sent: the prelude, then the file (alone: the file)
	script *rueidis.Lua // the object store.go, batch.go and peek.go call
	alone  bool         // sent without the prelude
}{
	"take.lua":  {takeBody, takeSource, takeScript, false},
	"batch.lua": {batchBody, batchSource, batchScript, false},
	"peek.lua":  {peekSource, peekSource, peekScript, true},
	"reset.lua": {resetSource, resetSource, resetScript, true},
	"block.lua": {blockBody, blockSource, blockScript, false},

	"acquire.lua": {acquireSource, acquireSource, acquireScript, true},
	"release.lua": {releaseSource, releaseSource, releaseScript, true},
}

// preludeFile is the file every script begins with.
const preludeFile = "prelude.lua"

// readScript is the file lua/name as it is on disk.
func readScript(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("lua", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readSource is the script of lua/name as a maintainer joins it by hand
// (cat lua/prelude.lua lua/name): the prelude, then the file.
func readSource(t *testing.T, name string) string {
	t.Helper()
	return readScript(t, preludeFile) + readScript(t, name)
}

// recorder is a rueidis.Client that records the commands sent through Do
// and answers each with an empty reply; Lua.Exec calls B and Do only.
type recorder struct {
	rueidis.Client
	sent [][]string
}

func (r *recorder) B() rueidis.Builder { return rueidis.Builder{} }

func (r *recorder) Do(_ context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	r.sent = append(r.sent, cmd.Commands())
	return rueidis.RedisResult{}
}

// TestScriptFilesAreTheScriptsSent: every file in lua/ is the prelude, a
// script the store sends after it, or one it sends alone, as it is: the SHA-1 of the prelude and
// the file on disk, joined, is the one the store's rueidis.Lua sends with
// EVALSHA (and EVAL, on NOSCRIPT, sends the text whose SHA-1 that is).
func TestScriptFilesAreTheScriptsSent(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("lua", "*.lua"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(scriptFiles)+1 {
		t.Errorf("lua/ holds %v; the store sends %d scripts besides %s", files, len(scriptFiles), preludeFile)
	}
	if preludeSource != readScript(t, preludeFile) {
		t.Errorf("%s: the embedded text differs from the file", preludeFile)
	}
	for _, f := range files {
		name := filepath.Base(f)
		if name == preludeFile {
			continue
		}
		s, ok := scriptFiles[name]
		if !ok {
			t.Errorf("%s: not a script the store sends", f)
			continue
		}
		if s.body != readScript(t, name) {
			t.Errorf("%s: the embedded text differs from the file", name)
		}
		src := readSource(t, name)
		if s.alone {
			src = readScript(t, name)
		}
		if s.source != src {
			t.Errorf("%s: the script sent is not %s and the file, joined", name, preludeFile)
		}
		sum := sha1.Sum([]byte(src))
		want := hex.EncodeToString(sum[:])
		rec := &recorder{}
		s.script.Exec(context.Background(), rec, nil, nil)
		if len(rec.sent) != 1 || len(rec.sent[0]) < 2 || rec.sent[0][0] != "EVALSHA" {
			t.Fatalf("%s: the script object sent %q, want one EVALSHA", name, rec.sent)
		}
		if got := rec.sent[0][1]; got != want {
			t.Errorf("%s: the store sends EVALSHA %s, the files' SHA-1 is %s", name, got, want)
		}
	}
}

var update = flag.Bool("update", false, "TestInlineCopies: rewrite the inline copies in lua/ from prelude.lua's function bodies")

// inlineMark matches the lines that open and close a step's body
// (prelude.lua) or an inline copy of it (the other files).
var inlineMark = regexp.MustCompile(`^([ \t]*)-- inline: (\w+) (begin|end)$`)

// inlineBlock is one marked block: the lines between its marks, each
// without the opening mark's indentation (blocks inside it, marks and all,
// included), and where it stands.
type inlineBlock struct {
	name       string
	indent     string
	begin, end int // the marks' line indexes
	body       []string
}

// inlineBlocks are the marked blocks of a file's lines, outer ones before
// the blocks inside them; a mark without its pair is an error.
func inlineBlocks(lines []string) ([]inlineBlock, error) {
	var out []inlineBlock
	var open []int // indexes in out of the blocks not closed yet
	for i, l := range lines {
		m := inlineMark.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if m[3] == "begin" {
			open = append(open, len(out))
			out = append(out, inlineBlock{name: m[2], indent: m[1], begin: i})
			continue
		}
		if len(open) == 0 {
			return nil, fmt.Errorf("line %d: %q closes no block", i+1, l)
		}
		b := &out[open[len(open)-1]]
		open = open[:len(open)-1]
		if m[2] != b.name || m[1] != b.indent {
			return nil, fmt.Errorf("line %d: %q closes block %s of line %d", i+1, l, b.name, b.begin+1)
		}
		b.end = i
		for _, x := range lines[b.begin+1 : i] {
			// Normalised: the block's indentation off, so that a copy may
			// stand at any depth; blank lines are blank.
			x = strings.TrimRight(x, " \t")
			if x != "" && !strings.HasPrefix(x, b.indent) {
				return nil, fmt.Errorf("line %d: indented less than block %s", b.begin+1, b.name)
			}
			b.body = append(b.body, strings.TrimPrefix(x, b.indent))
		}
	}
	if len(open) > 0 {
		b := out[open[len(open)-1]]
		return nil, fmt.Errorf("line %d: block %s is not closed", b.begin+1, b.name)
	}
	return out, nil
}

// TestInlineCopies: the straight paths of take.lua and batch.lua run
// prelude.lua's steps inline (a function call per step costs Redis more
// than the step: see prelude.lua's head). Every marked block of one name
// is the same, line by line but for the indentation, wherever it stands:
// a step's copies are the body of the function of its name in prelude.lua,
// between the marks there; a block prelude.lua does not mark (the straight
// path, the same in both scripts, steps and all) is take.lua's copy. Every
// step prelude.lua marks is copied at least once, every other block at
// least twice. With -update, the copies are rewritten from the originals.
func TestInlineCopies(t *testing.T) {
	pre := strings.Split(readScript(t, preludeFile), "\n")
	steps, err := inlineBlocks(pre)
	if err != nil {
		t.Fatalf("%s: %v", preludeFile, err)
	}
	original := map[string][]string{} // name -> the body its copies must be
	from := map[string]string{}       // name -> where that body is
	for _, s := range steps {
		if _, dup := original[s.name]; dup {
			t.Errorf("%s: step %s marked twice", preludeFile, s.name)
		}
		original[s.name], from[s.name] = s.body, preludeFile
		// The function wrapper: the nearest function header above the
		// body is the step's own.
		fn := ""
		for i := s.begin - 1; i >= 0; i-- {
			if f := strings.TrimSpace(pre[i]); strings.HasPrefix(f, "local function ") {
				fn = f
				break
			}
		}
		if !strings.HasPrefix(fn, "local function "+s.name+"(") {
			t.Errorf("%s: step %s is not the body of function %s (it follows %q)", preludeFile, s.name, s.name, fn)
		}
	}
	// take.lua first: its blocks are the originals of those prelude.lua
	// does not mark.
	// block.lua has no inline copy (the general path only).
	names := []string{"take.lua", "batch.lua", "block.lua"}
	var after []string // the scripts sent after the prelude (peek.lua is sent alone)
	for name, s := range scriptFiles {
		if !s.alone {
			after = append(after, name)
		}
	}
	if !slices.Equal(slices.Sorted(slices.Values(after)), slices.Sorted(slices.Values(names))) {
		t.Fatalf("TestInlineCopies reads %v; the store sends %v", names, slices.Collect(maps.Keys(scriptFiles)))
	}
	copies := map[string]int{}
	texts := map[string][]string{}
	for _, name := range names {
		lines := strings.Split(readScript(t, name), "\n")
		blocks, err := inlineBlocks(lines)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, b := range blocks {
			copies[b.name]++
			if _, ok := original[b.name]; !ok {
				original[b.name], from[b.name] = b.body, name
				continue
			}
			if !slices.Equal(b.body, original[b.name]) && !*update {
				t.Errorf("%s:%d: the inline copy of %s differs from the one in %s (go test -run TestInlineCopies -update rewrites it):\n%s",
					name, b.begin+1, b.name, from[b.name], firstDiff(b.body, original[b.name]))
			}
		}
		texts[name] = lines
	}
	for _, s := range steps {
		if copies[s.name] == 0 {
			t.Errorf("%s: step %s is inlined nowhere: drop its marks, or copy it", preludeFile, s.name)
		}
	}
	for n, c := range copies {
		if from[n] != preludeFile && c < 2 {
			t.Errorf("%s: block %s stands once only, and prelude.lua does not mark it", from[n], n)
		}
	}
	if !*update {
		return
	}
	// Rewrite one copy at a time, the steps first (also inside the other
	// blocks), then the other blocks from take.lua's, as it now stands.
	for _, stepsOnly := range []bool{true, false} {
		for _, name := range names {
			lines := texts[name]
			for changed := true; changed; {
				changed = false
				blocks, err := inlineBlocks(lines)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for _, b := range blocks {
					want := original[b.name]
					if stepsOnly != (from[b.name] == preludeFile) || slices.Equal(b.body, want) {
						continue
					}
					var out []string
					out = append(out, lines[:b.begin+1]...)
					for _, l := range want {
						if l != "" {
							l = b.indent + l
						}
						out = append(out, l)
					}
					lines = append(out, lines[b.end:]...)
					changed = true
					break
				}
				if !changed && stepsOnly && name == "take.lua" {
					// take.lua's other blocks are originals: refresh them.
					blocks, _ := inlineBlocks(lines)
					for _, b := range blocks {
						if from[b.name] == name {
							original[b.name] = b.body
						}
					}
				}
			}
			texts[name] = lines
		}
	}
	for _, name := range names {
		fixed := strings.Join(texts[name], "\n")
		if fixed == readScript(t, name) {
			continue
		}
		if err := os.WriteFile(filepath.Join("lua", name), []byte(fixed), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: inline copies rewritten; run the tests again (the scripts are embedded)", name)
	}
}

// firstDiff shows where a copy first departs from the original.
func firstDiff(copy, body []string) string {
	for i := 0; i < max(len(copy), len(body)); i++ {
		var c, b string
		if i < len(copy) {
			c = copy[i]
		}
		if i < len(body) {
			b = body[i]
		}
		if c != b || i >= len(copy) || i >= len(body) {
			return fmt.Sprintf("  line %d of the block:\n  copy:     %q\n  original: %q", i+1, c, b)
		}
	}
	return ""
}

// TestNoLuaInGo: the Lua lives in lua/*.lua only: no Go file of the
// package calls Redis from Lua.
func TestNoLuaInGo(t *testing.T) {
	lua := "redis" + ".call" // split, so that a grep of the package finds no Lua here either
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), lua) {
			t.Errorf("%s holds Lua (%s): scripts belong in lua/", f, lua)
		}
	}
}

// i8 packs vs as the scripts' arguments are packed: 8 bytes each,
// little-endian (the package doc's x8 writes the same bytes as
// redis-cli escapes).
func i8(vs ...int64) string {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return string(b)
}

// TestScriptsByHand runs each file as the package doc shows, through a real
// Redis: EVAL with the prelude's and the file's text, its keys, and ARGV packed by hand
// (not by the store's encoder), and decodes the replies with the store's
// decoders: a quota of Limit admits Limit calls and denies the next; the
// batch script decides a flight as the same Ops one by one.
func TestScriptsByHand(t *testing.T) {
	c, addr := scriptRedis(t)
	ctx := context.Background()
	tag := make([]byte, 6)
	if _, err := rand.Read(tag); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("{quotagate-scripts-test-%x}:", tag)
	var used []string
	key := func(name string) string {
		used = append(used, prefix+name)
		return prefix + name
	}
	t.Cleanup(func() {
		if len(used) > 0 {
			c.Do(context.Background(), c.B().Del().Key(used...).Build())
		}
	})
	eval := func(file string, keys []string, args ...string) (string, error) {
		return c.Do(ctx, c.B().Eval().Script(readSource(t, file)).Numkeys(int64(len(keys))).
			Key(keys...).Arg(args...).Build()).ToString()
	}
	const now = 1_764_457_000_123 // a caller's clock (WithClock): no window rolls mid-test

	t.Run("take.lua/one_quota", func(t *testing.T) {
		for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.TokenBucket} {
			k := key("one:" + alg.String())
			q := limitstore.Quota{Key: []byte(k), Algorithm: alg, Limit: 3, WindowMS: 60_000, PhaseMS: 17}
			x := q.PhaseMS
			if alg == limit.TokenBucket {
				q.Burst, q.PhaseMS, x = 3, 0, 3
			}
			op := limitstore.Op{Cost: 1, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.Quota{q}}
			// ARGV[1]: now, cost, algorithm, limit, window, phase or burst.
			arg := i8(now, 1, int64(algorithmCode(alg)), 3, 60_000, x)
			for i := 1; i <= 4; i++ {
				reply, err := eval("take.lua", []string{k}, arg)
				if err != nil {
					t.Fatalf("%s call %d: %v", alg, i, err)
				}
				if r := int64(binary.LittleEndian.Uint64([]byte(reply))); r != now && r != -now {
					t.Errorf("%s call %d: the reply's clock reading %d, want ±%d", alg, i, r, int64(now))
				}
				res, err := decideReply(&op, reply)
				if err != nil {
					t.Fatalf("%s call %d: %v", alg, i, err)
				}
				if want := i <= 3; res.Allowed != want || res.NowMS != now {
					t.Errorf("%s call %d: allowed %v at %d, want %v at %d", alg, i, res.Allowed, res.NowMS, want, int64(now))
				}
			}
		}
	})

	// The integers as decimal arguments, as redis-cli --eval passes them:
	// the same decisions as the packed argument, and through redis-cli
	// itself when it is on PATH.
	t.Run("take.lua/decimal_arguments", func(t *testing.T) {
		k := key("decimal")
		q := limitstore.Quota{Key: []byte(k), Algorithm: limit.FixedWindow, Limit: 3, WindowMS: 60_000}
		op := limitstore.Op{Cost: 1, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.Quota{q}}
		for i := 1; i <= 4; i++ {
			reply, err := eval("take.lua", []string{k}, strconv.Itoa(now), "1", "1", "3", "60000", "0")
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			res, err := decideReply(&op, reply)
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			if want := i <= 3; res.Allowed != want || res.NowMS != now {
				t.Errorf("call %d: allowed %v at %d, want %v at %d", i, res.Allowed, res.NowMS, want, int64(now))
			}
		}
		cli, err := exec.LookPath("redis-cli")
		if err != nil {
			t.Skip("!!! SKIPPED: redis-cli is not on PATH, so redis-cli --eval was NOT run")
		}
		joined := filepath.Join(t.TempDir(), "take.lua")
		if err := os.WriteFile(joined, []byte(readSource(t, "take.lua")), 0o644); err != nil {
			t.Fatal(err)
		}
		host, port, _ := net.SplitHostPort(addr)
		k2 := key("redis-cli")
		for i := 1; i <= 4; i++ {
			out, err := exec.Command(cli, "-h", host, "-p", port, "--eval", joined, k2, ",", strconv.Itoa(now), "1", "1", "3", "60000", "0").CombinedOutput()
			if err != nil || strings.Contains(string(out), "ERR") {
				t.Fatalf("redis-cli --eval, call %d: %v: %s", i, err, out)
			}
			// Not on a terminal, redis-cli prints the reply's bytes as
			// they are: now first, negated when denied.
			if len(out) < 8 {
				t.Fatalf("redis-cli --eval, call %d: %q", i, out)
			}
			r := int64(binary.LittleEndian.Uint64(out[:8]))
			if want := i > 3; (r < 0) != want || (r != now && r != -now) {
				t.Errorf("redis-cli --eval, call %d: clock reading %d, want %d (negated: denied %v)", i, r, int64(now), want)
			}
		}
	})

	t.Run("take.lua/server_clock", func(t *testing.T) {
		k := key("server-clock")
		reply, err := eval("take.lua", []string{k}, i8(0, 1, 1, 3, 60_000, 0))
		if err != nil {
			t.Fatal(err)
		}
		r := int64(binary.LittleEndian.Uint64([]byte(reply)))
		if d := time.Since(time.UnixMilli(r)); len(reply) != 8 || d < -time.Minute || d > time.Minute {
			t.Errorf("first call on the server's clock: %d bytes, clock reading %d (%v from ours), want 8 bytes, admitted now", len(reply), r, d)
		}
	})

	t.Run("take.lua/two_quotas_and_a_refund", func(t *testing.T) {
		ks, kb := key("two:sliding"), key("two:bucket")
		op := limitstore.Op{Cost: 1, N: 2, Quotas: [limitstore.MaxQuotas]limitstore.Quota{
			{Key: []byte(ks), Algorithm: limit.SlidingWindow, Limit: 2, WindowMS: 1000},
			{Key: []byte(kb), Algorithm: limit.TokenBucket, Limit: 5, WindowMS: 1000, Burst: 5},
		}}
		// ARGV[1]: now, cost, then per quota algorithm, limit, window,
		// phase or burst.
		arg := i8(now, 1, 0, 2, 1000, 0, 2, 5, 1000, 5)
		var last limitstore.Result
		for i := 1; i <= 3; i++ {
			reply, err := eval("take.lua", []string{ks, kb}, arg)
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			res, err := decideReply(&op, reply)
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			if want := i <= 2; res.Allowed != want {
				t.Errorf("call %d: allowed %v, want %v", i, res.Allowed, want)
			}
			if res.Allowed {
				last = res
			}
		}
		// A refund of the last admission: per quota a fifth integer, the
		// charge's window (or TAT), and a sixth, its epoch; then one more
		// call fits.
		ref := i8(now, 1,
			0, 2, 1000, 0, last.Quotas[0].Window, last.Quotas[0].Epoch,
			2, 5, 1000, 5, last.Quotas[1].Window, last.Quotas[1].Epoch)
		if _, err := eval("take.lua", []string{ks, kb}, ref); err != nil {
			t.Fatalf("refund: %v", err)
		}
		reply, err := eval("take.lua", []string{ks, kb}, arg)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := decideReply(&op, reply); err != nil || !res.Allowed {
			t.Errorf("after the refund: %+v, %v; want admitted", res, err)
		}
	})

	// batch.lua by hand: "ops", then one Op per argument in decimal, each
	// Op's keys the next KEYS; four Ops of 3 per minute on one key: the
	// fourth denied, through EVAL and through redis-cli --eval.
	t.Run("batch.lua/decimal_arguments", func(t *testing.T) {
		op := strconv.Itoa(now) + " 1 1 3 60000 0"
		check := func(how string, reply []byte) {
			t.Helper()
			if len(reply) < 3 || reply[0] != 1 || reply[1] != 3 || reply[2] != 1 {
				t.Errorf("%s: reply %q, want one Op not admitted: the fourth (3), denied (1)", how, reply)
			}
		}
		k := key("batch-decimal")
		reply, err := eval("batch.lua", []string{k, k, k, k}, "ops", op, op, op, op)
		if err != nil {
			t.Fatal(err)
		}
		check("EVAL", []byte(reply))
		cli, err := exec.LookPath("redis-cli")
		if err != nil {
			t.Skip("!!! SKIPPED: redis-cli is not on PATH, so redis-cli --eval was NOT run")
		}
		joined := filepath.Join(t.TempDir(), "batch.lua")
		if err := os.WriteFile(joined, []byte(readSource(t, "batch.lua")), 0o644); err != nil {
			t.Fatal(err)
		}
		host, port, _ := net.SplitHostPort(addr)
		k2 := key("batch-redis-cli")
		out, err := exec.Command(cli, "-h", host, "-p", port, "--eval", joined, k2, k2, k2, k2, ",", "ops", op, op, op, op).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli --eval: %v: %s", err, out)
		}
		check("redis-cli --eval", out)
	})

	t.Run("batch.lua", func(t *testing.T) {
		ka, kb := key("batch:a"), key("batch:b")
		// Four Ops of one fixed window of 2 per 60000 ms (phase 0) on the
		// keys a, a, a, b: admitted, admitted, denied, admitted.
		op := func(k string) *limitstore.Op {
			return &limitstore.Op{Cost: 1, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.Quota{
				{Key: []byte(k), Algorithm: limit.FixedWindow, Limit: 2, WindowMS: 60_000},
			}}
		}
		ops := []*limitstore.Op{op(ka), op(ka), op(ka), op(kb)}
		// KEYS: a, b. ARGV[2]: the window Ops' argument without its phase.
		// ARGV[1]: per Op n (+128: a later Op reads its key), its
		// argument's index in ARGV, its key's index in KEYS, its phase in
		// 4 bytes.
		heads := "\x81\x02\x01\x00\x00\x00\x00" +
			"\x81\x02\x01\x00\x00\x00\x00" +
			"\x01\x02\x01\x00\x00\x00\x00" +
			"\x01\x02\x02\x00\x00\x00\x00"
		reply, err := eval("batch.lua", []string{ka, kb}, heads, i8(now, 1, 1, 2, 60_000))
		if err != nil {
			t.Fatal(err)
		}
		members := make([]*waiter, len(ops))
		for i, o := range ops {
			members[i] = &waiter{}
			members[i].encode(o, now)
		}
		rs, parts, errs := make([]int64, len(ops)), make([]string, len(ops)), make([]error, len(ops))
		if err := splitBatch(reply, members, rs, parts, errs); err != nil {
			t.Fatal(err)
		}
		for i, o := range ops {
			if errs[i] != nil {
				t.Fatalf("Op %d: %v", i, errs[i])
			}
			res, err := decideStates(o, rs[i], parts[i])
			if err != nil {
				t.Fatalf("Op %d: %v", i, err)
			}
			if want := i != 2; res.Allowed != want {
				t.Errorf("Op %d: allowed %v, want %v", i, res.Allowed, want)
			}
		}
	})
}

// scriptRedis is a client of QUOTAGATE_REDIS_URL or, without it, of a
// redis-server of the test's own (persistence off, on a free loopback
// port, stopped at cleanup); the test is skipped when there is neither.
func scriptRedis(t *testing.T) (c rueidis.Client, addr string) {
	t.Helper()
	var opt rueidis.ClientOption
	if url := os.Getenv("QUOTAGATE_REDIS_URL"); url != "" {
		var err error
		if opt, err = ParseURL(url); err != nil {
			t.Fatalf("ParseURL(%q): %v", url, err)
		}
	} else {
		bin, err := exec.LookPath("redis-server")
		if err != nil {
			t.Skip("!!! SKIPPED: neither QUOTAGATE_REDIS_URL is set nor redis-server on PATH, " +
				"so the scripts were NOT run on a Redis")
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = l.Addr().String()
		l.Close()
		_, port, _ := net.SplitHostPort(addr)
		cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
		if err := cmd.Start(); err != nil {
			t.Fatalf("redis-server: %v", err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			conn, err := net.Dial("tcp", addr)
			if err == nil {
				conn.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redis-server on %s did not start: %v", addr, err)
			}
		}
		opt = rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true}
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(c.Close)
	return c, opt.InitAddress[0]
}
