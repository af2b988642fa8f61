package main

import (
	"strings"
	"testing"
	"time"
)

// TestHarness runs one short round of every contender against a redis-server
// of its own and checks what the table is built from: every contender
// decided; on the allowed path everything was admitted and quotagate wrote
// exactly once per decision (SET, or SETRANGE keeping the key's deadline)
// and ran at most one EVALSHA per decision, each with one TIME (none on the
// caller's clock) and one read (GET, or MGET for a batch: group commit); in
// the flood nearly everything was denied, the peers asked Redis once per
// decision and a quotagate denial that reached Redis only read (EVALSHA,
// TIME, GET or MGET).
func TestHarness(t *testing.T) {
	if _, err := redisBin(); err != nil {
		t.Skipf("!!! SKIPPED: no redis-server (QUOTAGATE_REDIS_SERVER_BIN or PATH): %v", err)
	}
	res, err := measureAll(config{rounds: 1, dur: 150 * time.Millisecond, goroutines: []int{8}, keys: 100, flood: true})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	res.print(&b)
	t.Log("\n" + b.String())
	if len(res.allowed) != len(contenders()) || len(res.flood) != len(contenders())-1 {
		t.Fatalf("%d allowed-path rows, %d flood rows", len(res.allowed), len(res.flood))
	}
	for _, r := range res.allowed {
		m := r.ms[0]
		if m.decisions == 0 || m.allowed != m.decisions {
			t.Errorf("%s: %d decisions, %d allowed", r.name, m.decisions, m.allowed)
		}
		if !strings.HasPrefix(r.name, "quotagate") {
			continue
		}
		perCall := int64(3) // EVALSHA, TIME, GET or MGET
		if strings.Contains(r.name, "caller's clock") {
			perCall = 2
		}
		// A write in place also asks its key's PTTL (and sets a deadline
		// only on a key without one): at most two per write. A few more:
		// a GET for a key a batch's MGET found nothing under, a new
		// connection's HELLO.
		extra := m.commands - m.writes - m.deadlines - perCall*m.scriptCalls
		if m.writes != m.decisions || m.deadlines > 2*m.writes || m.scriptCalls == 0 || m.scriptCalls > m.decisions || extra < 0 || extra > 2+m.scriptCalls/100 {
			t.Errorf("%s: %d commands, %d writes, %d deadlines, %d script calls for %d decisions; want one write per decision, at most two TTL repair commands per write, at most one call per decision and %d commands per call",
				r.name, m.commands, m.writes, m.deadlines, m.scriptCalls, m.decisions, perCall)
		}
	}
	for _, r := range res.flood {
		m := r.ms[0]
		if m.decisions < 100 || allowedShare(m) > 0.1 {
			t.Errorf("%s flood: %d decisions, %.3f allowed", r.name, m.decisions, allowedShare(m))
		}
		if !strings.HasPrefix(r.name, "quotagate") {
			if scriptCalls(m) < 0.99 {
				t.Errorf("%s flood: %.3f script calls per decision", r.name, scriptCalls(m))
			}
			continue
		}
		// A quotagate denial that reaches Redis only reads: 3 commands per
		// script call (EVALSHA, TIME, GET or MGET; 2 on the caller's
		// clock), plus one write for each request the flood still admitted
		// and its key's deadline.
		if m.scriptCalls > 0 && m.commands > 3*m.scriptCalls+2*m.allowed {
			t.Errorf("%s flood: %d commands for %d script calls and %d admitted, want at most 3 per call plus a write and a PEXPIREAT per admission",
				r.name, m.commands, m.scriptCalls, m.allowed)
		}
	}
}
