package memstore_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limitstore"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

// memoryChildEnv makes the test binary run TestMemoryPerKey's measurement
// itself, in a fresh process.
const memoryChildEnv = "MEMSTORE_MEMORY_CHILD"

// fill makes a store of MaxKeys maxKeys hold n keys (distinct identities of
// a sliding-window quota, each with one request) and returns it.
func fill(t testing.TB, maxKeys, n int) *memstore.Store {
	s, err := memstore.New(memstore.WithMaxKeys(maxKeys), memstore.WithClock(func() time.Time { return epoch }))
	if err != nil {
		t.Fatal(err)
	}
	o := limitstore.Op{Cost: 1, N: 1, Quotas: [limitstore.MaxQuotas]limitstore.Quota{{Algorithm: limit.SlidingWindow, Limit: 100, WindowMS: 60_000}}}
	key := make([]byte, 0, 64)
	for i := range n {
		key = strconv.AppendInt(append(key[:0], "qg:{"...), int64(i), 16)
		o.Quotas[0].Key = append(key, "}:100p60:s:r:k=client"...)
		if _, err := s.Take(context.Background(), &o); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// measure returns the live heap (runtime.MemStats.HeapAlloc after a GC)
// and the resident set size (VmRSS), in bytes.
func measure(t testing.TB) (heap, rss uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return ms.HeapAlloc, kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0, 0
}

// Issue 12: memory per tracked key at 1 000 000 keys, at most 64 B, and
// the documented figures (package doc, DefaultMaxKeys): a full store's
// tables take at most 45 B per entry (DefaultMaxKeys: 11 MiB), and the RSS
// it adds to a process at most 80 B per entry (DefaultMaxKeys: 20 MiB;
// measured 52 to 67; not checked under -race, whose shadow memory counts in
// the RSS). Measured in a fresh
// process each (this test runs its own binary again): the live heap after a
// GC (runtime.ReadMemStats) and the resident set size (VmRSS), before and
// after filling a store, divided by the entries held. The RSS includes what
// the runtime still keeps of the smaller tables left behind while growing.
func TestMemoryPerKey(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("SKIPPED: reads the RSS from /proc/self/status (Linux only)")
	}
	if maxKeys, err := strconv.Atoi(os.Getenv(memoryChildEnv)); err == nil {
		heap0, rss0 := measure(t)
		s := fill(t, maxKeys, max(maxKeys, 2*memstore.DefaultMaxKeys))
		heap1, rss1 := measure(t)
		fmt.Printf("MEMORY held=%d heap=%d rss=%d\n", s.Len(), heap1-heap0, rss1-rss0)
		runtime.KeepAlive(s)
		return
	}
	for _, maxKeys := range []int{1_000_000, memstore.DefaultMaxKeys} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryPerKey$", "-test.count=1")
		cmd.Env = append(os.Environ(), memoryChildEnv+"="+strconv.Itoa(maxKeys))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("measuring process: %v\n%s", err, out)
		}
		var held, heap, rss float64
		i := bytes.Index(out, []byte("MEMORY "))
		if i < 0 {
			t.Fatalf("no figures from the measuring process:\n%s", out)
		}
		if _, err := fmt.Sscanf(string(out[i:]), "MEMORY held=%g heap=%g rss=%g", &held, &heap, &rss); err != nil {
			t.Fatalf("%v in %q", err, out[i:])
		}
		t.Logf("MaxKeys %d, full: %.0f entries; heap %.1f B per entry (%.1f MiB), RSS %.1f B per entry (%.1f MiB)",
			maxKeys, held, heap/held, heap/(1<<20), rss/held, rss/(1<<20))
		if held < float64(maxKeys)*99/100 {
			t.Errorf("MaxKeys %d: only %.0f entries held", maxKeys, held)
		}
		if heap/held > 45 {
			t.Errorf("MaxKeys %d: heap %.1f B per entry, documented <= 45 B", maxKeys, heap/held)
		}
		switch {
		case raceEnabled:
			t.Logf("RSS not checked under -race: the race detector's shadow memory counts in it")
		case rss/held > 80:
			t.Errorf("MaxKeys %d: RSS %.1f B per entry, documented <= 80 B", maxKeys, rss/held)
		}
	}
}
