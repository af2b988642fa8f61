package limit

import (
	"crypto/sha256"
	"encoding/hex"
)

// maxRawIdentity is the longest identity stored as is; longer ones (and all
// of them with WithHashKeys) are stored as their hex SHA-256 digest.
const maxRawIdentity = 128

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

// appendIdentity appends the key form of an application identity (from
// Policy.KeyFunc or Consume) to buf: "r:k=" + the identity, or, when it is
// longer than 128 bytes or HashKeys is on, "h:" + hex SHA-256 of "k=" + the
// identity. The "k=" domain keeps an application identity apart from a
// client address, which is keyed as "r:<address>" or "h:" + SHA-256 of the
// address text (appendAddr) and never starts with "k=": a KeyFunc value that
// spells an address is not that address's allowance. The r/h tag keeps a
// hashed identity from ever colliding with a raw one.
func (l *Limiter) appendIdentity(buf []byte, identity string) []byte {
	if len(identity) > maxRawIdentity || l.cfg.hashKeys {
		start := len(buf)
		buf = append(append(buf, "k="...), identity...)
		sum := sha256.Sum256(buf[start:])
		buf = append(buf[:start], "h:"...)
		return hex.AppendEncode(buf, sum[:])
	}
	buf = append(buf, "r:k="...)
	return append(buf, identity...)
}

func appendDigest(buf, id []byte) []byte {
	sum := sha256.Sum256(id)
	buf = append(buf, "h:"...)
	return hex.AppendEncode(buf, sum[:])
}

// appendKey appends the store key of (bucket, id) to buf, where id is the
// output of appendIdentity:
//
//	<prefix>:{<tag>}:<bucket>:<algorithm letter>:<r|h>:<identity>
//
// The tag is 8 hex digits of a 64-bit hash of (bucket, identity): the
// bucket's FNV-1a hash (computed once per bucket) mixed with the identity's.
// The braces make it the Redis Cluster hash tag, so every key of one (bucket,
// identity) lives in one slot, and braces later in the bucket (route
// templates) cannot take the slot over because Redis uses the first "{...}"
// only. It also returns the 64-bit hash (for store sharding) and the window
// phase: FNV-1a of the identity modulo the window, or 0 with AlignWindows or a
// TokenBucket.
func (l *Limiter) appendKey(buf []byte, bucket bucketRef, id []byte) ([]byte, uint64, int64) {
	ih := fnvAdd(fnvOffset, id)
	h := mix64(bucket.hash ^ ih*0x9e3779b97f4a7c15)
	tag := [4]byte{byte(h >> 56), byte(h >> 48), byte(h >> 40), byte(h >> 32)}
	buf = append(buf, l.cfg.keyPrefix...)
	buf = append(buf, ":{"...)
	buf = hex.AppendEncode(buf, tag[:])
	buf = append(buf, "}:"...)
	buf = append(buf, bucket.name...)
	buf = append(buf, ':', l.policy.Algorithm.letter(), ':')
	buf = append(buf, id...)
	var phase int64
	if !l.policy.AlignWindows && l.policy.Algorithm != TokenBucket {
		phase = int64(ih % uint64(l.res.windowMS))
	}
	return buf, h, phase
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
