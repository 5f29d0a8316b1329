package ratelimit

import (
	"crypto/sha256"
	"encoding/hex"
)

// Tenant IDs reach the limiter from requests, so the key built from one must
// stay safe whatever it holds. appendTenantKey maps every ID to its own key,
// one to one:
//
//   - A byte outside printable ASCII, and each of '%', '{', '}' and '#', is
//     written as %XX. Keys are then plain text in Redis and in logs, '%' is
//     never ambiguous, and with no brace left a tenant cannot pick its Redis
//     Cluster hash slot (Redis hashes only the part between braces when there
//     is one).
//   - An ID whose encoded form is longer than maxTenantKey bytes becomes '#'
//     and the hex SHA-256 of the raw ID: a 1 MB header makes a 68-byte key.
//     No encoded ID holds a raw '#', so digests meet no other key.
//   - The ID "unknown" is written "%75nknown" (an escaped 'u', which the
//     encoding never produces otherwise), so it does not share rl:unknown,
//     the bucket of requests without a tenant.
//
// An ID of safe bytes, as most are, costs one scan and a copy.

// maxTenantKey is the longest encoded tenant ID kept as is.
const maxTenantKey = 128

// unknownKey is the bucket of requests that have no tenant.
const unknownKey = "rl:unknown"

// safeKeyByte reports whether a byte goes into a key unescaped.
var safeKeyByte = func() (t [256]bool) {
	for c := 0x21; c <= 0x7e; c++ {
		t[c] = true
	}
	for _, c := range "%{}#" {
		t[c] = false
	}
	return t
}()

// maxKeyLen bounds every key appendTenantKey builds.
const maxKeyLen = len("rl:") + maxTenantKey

// appendTenantKey appends id's key to dst: at most maxKeyLen bytes, so a
// caller can build it in a stack buffer.
func appendTenantKey(dst []byte, id string) []byte {
	if id == "" {
		return append(dst, unknownKey...)
	}
	n := len(id)
	for i := 0; i < len(id); i++ {
		if !safeKeyByte[id[i]] {
			n += 2
		}
	}
	dst = append(dst, "rl:"...)
	switch {
	case n > maxTenantKey:
		sum := sha256.Sum256([]byte(id))
		dst = append(dst, '#')
		return hex.AppendEncode(dst, sum[:])
	case n == len(id) && id != "unknown":
		return append(dst, id...)
	}
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(id); i++ {
		c := id[i]
		if safeKeyByte[c] && !(i == 0 && id == "unknown") {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&0xf])
	}
	return dst
}
