package limit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"github.com/quotagate/quotagate/engine/limitstore"
	"strconv"
)

// keyer spells the store keys of a (bucket, identity) and their window
// phases. It holds the key settings of its New and whether the policy's
// windows have a per-identity phase, and is built once by New.
type keyer struct {
	prefix   string
	hashKeys bool
	phased   bool // window algorithms without AlignWindows: phase = hash(identity) mod window
}

// stateSignature spells everything that decides how a stored state is read:
// the window and the algorithm letter (windowSignature: "p60f"), plus
// "a" for a window algorithm with AlignWindows (its windows start at other
// instants than the per-identity phase's), plus "w<ms>" for a token bucket
// with MaxWait (its TAT may run MaxWait ahead with reservations). Two quotas whose states would not
// be interchangeable never have the same state signature, so, being part of
// every key, it keeps them from ever reading or writing one record, whatever
// their Name. It depends on the policy alone, so every process of a fleet
// spells the same key. Limit and Burst are not part of it: a count, or a
// token bucket's TAT, means the same under another Limit (see
// carryover.go), so a policy whose Limit or Burst changes under one Name
// keeps what each identity used.
func stateSignature(a Algorithm, limit, windowMS, burst int64, aligned bool, maxWaitMS int64) string {
	s := windowSignature(a, windowMS)
	if aligned && a != TokenBucket {
		s += "a"
	}
	if maxWaitMS > 0 {
		s += "w" + strconv.FormatInt(maxWaitMS, 10)
	}
	return s
}

// maxRawIdentity is the longest identity stored as is; longer ones (and all
// of them with WithHashKeys) are stored as their hex SHA-256 digest.
const maxRawIdentity = 128

// appendKeys appends the store keys of (bucket, id) for the quotas of set
// to buf and points op.Quotas[i].Key and PhaseMS at them. Each key is
//
//	<prefix>:{<tag>}:<bucket>:<state signature>:<identity>
//
// where the state signature is the quota's (quotaSpec.state: the plan's,
// or the fallback bucket's for the fallback identity), e.g.
// "quotagate:{7e4e4151}:login:p60f:r:192.0.2.1"; where <identity> is the
// identity's key form (appendIdentity). The tag is 8 hex digits of a 64-bit
// hash of (bucket, identity): the bucket's FNV-1a hash (computed once per
// bucket) mixed with the identity's. The braces make it the Redis Cluster
// hash tag, so every key of one (bucket, identity), every quota's, lives in
// one slot (one script touches them all), and braces later in the bucket
// (route templates) cannot take the slot over because Redis uses the first
// "{...}" only. The window phase of a quota is FNV-1a of the identity's key
// form modulo its window, or 0 with AlignWindows or a TokenBucket. (Stores
// that place keys hash them with a keyed hash of their own: FNV serves only
// the tag and the phase, which must be the same in every process of a
// fleet.)
func (k *keyer) appendKeys(buf []byte, bucket *bucketRef, id *who, set *quotaSet, op *limitstore.Op) []byte {
	var ends [limitstore.MaxQuotas + 1]int
	ends[0] = len(buf)
	buf = append(buf, k.prefix...)
	buf = append(buf, ":{"...)
	tagAt := len(buf)
	buf = append(buf, "00000000}:"...)
	buf = append(buf, bucket.name...)
	buf = append(buf, ':')
	head := len(buf)
	buf = append(buf, set.q[0].state...)
	buf = append(buf, ':')
	idAt := len(buf)
	buf = k.appendIdentity(buf, id)
	idEnd := len(buf)
	ih := fnvAdd(fnvOffset, buf[idAt:])
	h := mix64(bucket.hash ^ ih*0x9e3779b97f4a7c15)
	putHex8(buf[tagAt:tagAt+8], uint32(h>>32))
	ends[1] = idEnd
	for i := 1; i < set.n; i++ {
		buf = append(buf, buf[ends[0]:head]...)
		buf = append(buf, set.q[i].state...)
		buf = append(buf, ':')
		buf = append(buf, buf[idAt:idEnd]...)
		ends[i+1] = len(buf)
	}
	for i := range set.n {
		q := &op.Quotas[i]
		q.Key = buf[ends[i]:ends[i+1]:ends[i+1]]
		q.PhaseMS = 0
		if k.phased {
			q.PhaseMS = int64(ih % uint64(set.q[i].windowMS))
		}
	}
	return buf
}

// appendIdentity appends the key form of id:
//   - an application identity (KeyFunc, Consume): "r:k=" + the identity, or,
//     when it is longer than 128 bytes or HashKeys is on, "h:" + hex SHA-256
//     of "k=" + the identity;
//   - a client address: "r:" + its text, or with HashKeys "h:" + hex SHA-256
//     of its text;
//   - the fallback identity: "r:", which no KeyFunc (blank falls through)
//     and no address can produce.
//
// The "k=" domain keeps an application identity apart from a client
// address, whose text never starts with "k=": a KeyFunc value that spells an
// address is not that address's allowance. The r/h tag keeps a hashed
// identity from ever colliding with a raw one.
func (k *keyer) appendIdentity(buf []byte, id *who) []byte {
	switch {
	case id.src == KeySourceFallback:
		return append(buf, "r:"...)
	case id.src == KeySourceKeyFunc || id.src == KeySourceConsume:
		if len(id.text) > maxRawIdentity || k.hashKeys {
			start := len(buf)
			buf = append(append(buf, "k="...), id.text...)
			sum := sha256.Sum256(buf[start:])
			return appendDigest(buf[:start], sum[:])
		}
		return append(append(buf, "r:k="...), id.text...)
	case id.text != "": // a plain IPv4 peer: never with HashKeys
		return append(append(buf, "r:"...), id.text...)
	case k.hashKeys:
		var text [64]byte // the longest address text is 39 bytes: no allocation
		sum := sha256.Sum256(id.addr.AppendTo(text[:0]))
		return appendDigest(buf, sum[:])
	}
	return id.addr.AppendTo(append(buf, "r:"...))
}

func appendDigest(buf, sum []byte) []byte {
	return hex.AppendEncode(append(buf, "h:"...), sum)
}

// putHex8 writes v into b[:8] as 8 lowercase hex digits, the most
// significant first (what hex.Encode writes for v's 4 big-endian bytes), in
// one word: each nibble is spread into a byte of its own, and a byte holding
// 10 or more gets the distance from '9'+1 to 'a' added.
func putHex8(b []byte, v uint32) {
	x := uint64(v)
	x = (x | x<<16) & 0x0000ffff0000ffff
	x = (x | x<<8) & 0x00ff00ff00ff00ff
	x = (x | x<<4) & 0x0f0f0f0f0f0f0f0f // byte i: nibble i, from the least significant
	letters := (x + 0x0606060606060606) >> 4 & 0x0101010101010101
	x += 0x3030303030303030 + letters*('a'-'0'-10)
	binary.BigEndian.PutUint64(b, x) // nibble 7 first
}

// FNV-1a, 64 bit. Inlined rather than hash/fnv so that hashing a []byte does
// not allocate behind an interface.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvAdd(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

func fnvAddString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// mix64 is the splitmix64 finaliser: every input bit affects every output bit.
func mix64(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
