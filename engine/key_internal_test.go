package limit

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/quotagate/quotagate/engine/limitstore"
)

// keyOf spells the key and phase of one quota (state, window) for (bucket, id).
func keyOf(k *keyer, buf []byte, bucket *bucketRef, id *who, state string, windowMS int64) ([]byte, int64) {
	set := quotaSet{n: 1}
	set.q[0] = quotaSpec{limit: 1, windowMS: windowMS, state: state}
	var op limitstore.Op
	k.appendKeys(buf, bucket, id, &set, &op)
	return op.Quotas[0].Key, op.Quotas[0].PhaseMS
}

// The window phase is stable for one identity, spread over the window
// between identities, and 0 with AlignWindows (not phased).
func TestFixedWindowPhasePerIdentity(t *testing.T) {
	k := keyer{prefix: "quotagate", phased: true}
	bucket := newBucketRef("1p60f")
	phase := func(k *keyer, id string) int64 {
		_, ph := keyOf(k, nil, &bucket, &who{src: KeySourceKeyFunc, text: id}, "1p60f", 60_000)
		return ph
	}
	if first, again := phase(&k, "198.51.100.1"), phase(&k, "198.51.100.1"); first != again {
		t.Fatal("phase is not stable for one identity")
	}
	seen := map[int64]bool{}
	for _, id := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3", "2001:db8::", "user-42"} {
		ph := phase(&k, id)
		if ph < 0 || ph >= 60_000 {
			t.Fatalf("phase %d outside the window", ph)
		}
		seen[ph] = true
	}
	if len(seen) < 4 {
		t.Fatalf("phases barely differ between identities: %v", seen)
	}
	aligned := keyer{prefix: "quotagate"}
	if ph := phase(&aligned, "198.51.100.1"); ph != 0 {
		t.Fatalf("AlignWindows phase %d, want 0", ph)
	}
}

// The tag of a key is the Redis Cluster hash tag: 8 hex digits in the first
// braces, the same for one (bucket, identity), and the key ends in the
// identity's key form.
func TestKeyTag(t *testing.T) {
	k := keyer{prefix: "app"}
	b := newBucketRef("/v1/{a} 5p60")
	id := &who{src: KeySourceSocket, text: "192.0.2.1"}
	key, _ := keyOf(&k, nil, &b, id, "5p60", 60_000)
	again, _ := keyOf(&k, make([]byte, 0, 8), &b, id, "5p60", 60_000)
	s := string(key)
	if s != string(again) || !strings.HasPrefix(s, "app:{") || s[13] != '}' || !strings.HasSuffix(s, ":/v1/{a} 5p60:5p60:r:192.0.2.1") {
		t.Fatalf("key %q (again %q)", key, again)
	}
	for _, c := range s[5:13] {
		if !strings.ContainsRune("0123456789abcdef", c) {
			t.Fatalf("tag %q is not hex", s[5:13])
		}
	}
}

// Several quotas: one key each, all with one hash tag (one Cluster slot),
// each carrying its own state signature, each phase taken modulo its own
// window; a buffer that already holds bytes keeps them.
func TestKeysOfSeveralQuotas(t *testing.T) {
	k := keyer{prefix: "app", phased: true}
	b := newBucketRef("reports")
	set := quotaSet{n: 3}
	set.q[0] = quotaSpec{limit: 2, windowMS: 10_000, state: "2p10"}
	set.q[1] = quotaSpec{limit: 5, windowMS: 60_000, state: "5p60"}
	set.q[2] = quotaSpec{limit: 9, windowMS: 7, state: "pro=9p7ms"}
	var op limitstore.Op
	buf := k.appendKeys([]byte("junk"), &b, &who{src: KeySourceKeyFunc, text: "user-1"}, &set, &op)
	if string(buf[:4]) != "junk" {
		t.Fatalf("buffer prefix lost: %q", buf)
	}
	tag := string(op.Quotas[0].Key[:14])
	for i := range set.n {
		key := string(op.Quotas[i].Key)
		if !strings.HasPrefix(key, tag) || key != tag+":reports:"+set.q[i].state+":r:k=user-1" {
			t.Fatalf("key %d %q (tag %q)", i, key, tag)
		}
		if ph := op.Quotas[i].PhaseMS; ph < 0 || ph >= set.q[i].windowMS {
			t.Fatalf("phase %d of quota %d outside its window", ph, i)
		}
		one, ph := keyOf(&k, nil, &b, &who{src: KeySourceKeyFunc, text: "user-1"}, set.q[i].state, set.q[i].windowMS)
		if string(one) != key || ph != op.Quotas[i].PhaseMS {
			t.Fatalf("quota %d alone: %q phase %d, with the others %q phase %d", i, one, ph, key, op.Quotas[i].PhaseMS)
		}
	}
}

// putHex8 writes what hex.Encode writes for the 4 big-endian bytes of its
// value: every nibble value in every position, and the extremes.
func TestPutHex8AsHexEncode(t *testing.T) {
	vs := []uint32{0, 1, 9, 10, 15, 16, 0x99999999, 0xaaaaaaaa, 0xffffffff, 0x0123abcd, 0xfedc3210, 0x7e4e4151}
	for pos := range 8 {
		for nib := range uint32(16) {
			vs = append(vs, nib<<(4*pos), ^(nib << (4 * pos)), 0x5a5a5a5a^nib<<(4*pos))
		}
	}
	for _, v := range vs {
		b := []byte("xxxxxxxxyy")
		putHex8(b, v)
		want := hex.EncodeToString(binary.BigEndian.AppendUint32(nil, v)) + "yy"
		if string(b) != want {
			t.Fatalf("putHex8(%#x) = %q, want %q", v, b, want)
		}
	}
}
