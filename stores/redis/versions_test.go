package redisstore

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// minRedis is the oldest Redis the store runs on: the latest "since" of
// the commands and options it uses (docs/decisions/0120). doc.go and the
// README state it.
const minRedis = "6.2.0"

// redisSince is the Redis version that introduced each command the store
// sends, and each option the scripts pass ("COMMAND OPTION": a literal of
// letters only after the command, in upper case, as Redis reads options in
// any case), from the commands' documentation. A command or option missing
// here fails TestRedisCommandsWithinMinimum: add it with its version.
var redisSince = map[string]string{
	// Lua scripts (lua/*.lua).
	"DEL":              "1.0.0",
	"GET":              "1.0.0",
	"INFO":             "1.0.0",
	"INFO KEYSPACE":    "2.6.0", // a section argument
	"MGET":             "1.0.0",
	"PEXPIRE":          "2.6.0",
	"PEXPIREAT":        "2.6.0",
	"PEXPIRE NX":       "7.0.0", // NX, XX, GT, LT: 7.0
	"PEXPIRE XX":       "7.0.0",
	"PEXPIRE GT":       "7.0.0",
	"PEXPIRE LT":       "7.0.0",
	"PEXPIREAT NX":     "7.0.0",
	"PEXPIREAT XX":     "7.0.0",
	"PEXPIREAT GT":     "7.0.0",
	"PEXPIREAT LT":     "7.0.0",
	"PTTL":             "2.8.0", // -1 for a key without a deadline, -2 for none (2.6: -1 for both)
	"SET":              "1.0.0",
	"SET PX":           "2.6.12",
	"SET PXAT":         "6.2.0",
	"SETRANGE":         "2.2.0",
	"TIME":             "2.6.0",
	"ZADD":             "1.2.0",
	"ZADD XX":          "3.0.2",
	"ZCARD":            "1.2.0",
	"ZREM":             "1.2.0",
	"ZREMRANGEBYSCORE": "1.2.0",
	"ZSCORE":           "1.2.0",
	// Commands the Go store builds (rueidis Builder methods).
	"ClusterSlots": "3.0.0",
	"ConfigGet":    "2.0.0",
	"Exists":       "1.0.0",
	"Info":         "1.0.0",
	"Ping":         "1.0.0",
	"Publish":      "2.0.0",
	"ScriptLoad":   "2.6.0",
	"Subscribe":    "2.0.0",
	// rueidis.Lua.Exec: EVALSHA, and EVAL on NOSCRIPT; a script's writes
	// after TIME need effects replication, the default since 5.0.
	"EVALSHA": "5.0.0",
}

// The scan: a Redis call in a script and its command literal, the option
// literals after it, and a command the Go store builds.
var (
	luaCall    = regexp.MustCompile(`\b(?:redis\.)?r?p?call\(`)
	luaLiteral = regexp.MustCompile(`\b(?:redis\.)?r?p?call\('([A-Za-z]+)'([^\n]*)`)
	luaOption  = regexp.MustCompile(`'([A-Za-z]+)'`)
	goBuilder  = regexp.MustCompile(`\.B\(\)\.([A-Z][A-Za-z]*)\(`)
)

// versionLess reports whether Redis version a (major.minor.patch) is
// older than b.
func versionLess(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y [3]int
	if _, err := fmt.Sscanf(a, "%d.%d.%d", &x[0], &x[1], &x[2]); err != nil {
		t.Fatalf("version %q: %v", a, err)
	}
	if _, err := fmt.Sscanf(b, "%d.%d.%d", &y[0], &y[1], &y[2]); err != nil {
		t.Fatalf("version %q: %v", b, err)
	}
	return slices.Compare(x[:], y[:]) < 0
}

// TestRedisCommandsWithinMinimum: every command the scripts and the Go
// store send, and every option the scripts pass, is known to redisSince
// and no newer than minRedis, and the newest of them is minRedis itself
// (the stated minimum is the true one); doc.go and the README name it.
func TestRedisCommandsWithinMinimum(t *testing.T) {
	used := map[string][]string{} // command or option -> where
	files, err := filepath.Glob(filepath.Join("lua", "*.lua"))
	if err != nil || len(files) == 0 {
		t.Fatalf("lua/*.lua: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "--") {
				continue
			}
			at := fmt.Sprintf("%s:%d", f, i+1)
			calls := luaCall.FindAllStringIndex(line, -1)
			lits := luaLiteral.FindAllStringSubmatch(line, -1)
			if len(calls) != len(lits) {
				t.Errorf("%s: a Redis call whose command is not a string literal: %s", at, strings.TrimSpace(line))
			}
			for _, m := range lits {
				cmd := strings.ToUpper(m[1])
				used[cmd] = append(used[cmd], at)
				for _, o := range luaOption.FindAllStringSubmatch(m[2], -1) {
					opt := cmd + " " + strings.ToUpper(o[1])
					used[opt] = append(used[opt], at)
				}
			}
		}
	}
	gofiles, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range gofiles {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range goBuilder.FindAllStringSubmatch(string(b), -1) {
			used[m[1]] = append(used[m[1]], f)
		}
		if strings.Contains(string(b), "rueidis.NewLuaScript(") {
			used["EVALSHA"] = append(used["EVALSHA"], f)
		}
	}
	newest := "0.0.0"
	for _, c := range slices.Sorted(maps.Keys(used)) {
		since, ok := redisSince[c]
		if !ok {
			t.Errorf("%s (%s): not in redisSince; add the Redis version that introduced it", c, used[c][0])
			continue
		}
		if versionLess(t, minRedis, since) {
			t.Errorf("%s (%s) needs Redis %s, newer than the minimum %s", c, used[c][0], since, minRedis)
		}
		if versionLess(t, newest, since) {
			newest = since
		}
	}
	for _, c := range []string{"GET", "SET PXAT", "SETRANGE", "EVALSHA", "ScriptLoad"} {
		if len(used[c]) == 0 {
			t.Errorf("%s: not found in the scripts or the store; the scan is broken", c)
		}
	}
	if versionLess(t, newest, minRedis) {
		t.Errorf("the newest command or option used needs Redis %s, but minRedis is %s: lower the stated minimum", newest, minRedis)
	}
	short := strings.Join(strings.Split(minRedis, ".")[:2], ".") // 6.2
	for _, doc := range []string{"doc.go", filepath.Join("..", "..", "README.md")} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "Redis** "+short+" or later") && !strings.Contains(string(b), "Redis "+short+" or later") {
			t.Errorf("%s does not state the minimum \"Redis %s or later\"", doc, short)
		}
	}
}
