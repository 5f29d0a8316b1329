package ratelimit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
)

// Tenant IDs reach the limiter from requests, so the key built from one must
// stay safe whatever it holds. Every key is a limiter's prefix and the
// tenant's part, one to one:
//
//   - The prefix is "rl:" for an unnamed limiter (Name empty), the
//     seed's keys, so a deployment keeps its counts across an upgrade, and
//     "rl:<name>#" for a named one. The encoded name is never empty and
//     holds no raw '#', so the first '#' ends it, and an unnamed key never
//     has a '#' after its fourth byte: named and unnamed keys never meet.
//   - A byte outside printable ASCII, and each of '%', '{', '}' and '#', is
//     written as %XX, in the name and the tenant's part alike. Keys are then
//     plain text in Redis and in logs, '%' is never ambiguous, and with no
//     brace left a tenant cannot pick its Redis Cluster hash slot (Redis
//     hashes only the part between braces when there is one).
//   - A tenant ID whose encoded form is longer than maxTenantKey bytes
//     becomes '#' and the hex SHA-256 of the raw ID: a 1 MB header makes a
//     68-byte part. No encoded ID holds a raw '#', so digests meet no other
//     key.
//   - A request without a tenant counts under "unknown"; the ID "unknown"
//     is written "%75nknown" (an escaped 'u', which the encoding never
//     produces otherwise), so it does not share that bucket.
//   - A request without a tenant keyed by its client's address counts
//     under "#ip:" and the address, or for IPv6 the prefix
//     ("#ip:2001:db8:1:2::/64"). No tenant's part starts with "#i": a
//     digest's next byte is a hex digit.
//   - A sliding window's key is the fixed window's in braces,
//     "{rl:<tenant>}": the tag of the two keys the store counts it in, one
//     per window (see takeScript), so that both are in one cluster hash
//     slot. The key inside holds no brace, so no tenant can move the tag.
//   - A tenant with quotas (Options.Quotas, Plan.Quotas) has all its
//     limits, the main one included, in one Redis hash, its main key in
//     braces: "{rl:acme}". Redis hashes "{rl:acme}" as it hashes
//     "rl:acme", so the script call that the main key routes finds it on
//     its node, and no tenant can choose its slot. The hash's fields are
//     named by the limits' names (see docs/redis.md).
//   - An InFlight limiter's key is the fixed window's, "rl:<tenant>",
//     holding on Redis a sorted set of the tenant's slots.
//
// An ID of safe bytes, as most are, costs one scan and a copy.

// maxTenantKey is the longest encoded tenant ID kept as is.
const maxTenantKey = 128

// maxName is the longest Name; encoded, it takes at most three
// times as many bytes.
const maxName = 64

// unnamedPrefix is the prefix of an unnamed limiter's keys.
const unnamedPrefix = "rl:"

// unknownTenant is the tenant part of requests that have no tenant.
const unknownTenant = "unknown"

// unknownKey is the unnamed limiter's bucket of requests without a tenant.
const unknownKey = unnamedPrefix + unknownTenant

// maxKeyLen bounds every key appendKey builds, so that a caller can build
// it in a stack buffer.
const maxKeyLen = len("{rl:") + 3*maxName + len("#") + maxTenantKey + len("}")

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

const hexDigits = "0123456789ABCDEF"

// keyPrefix returns the prefix of the keys of a limiter named name. It
// panics, naming Name, when name cannot be one (see checkName).
func keyPrefix(name string) string {
	if name == "" {
		return unnamedPrefix
	}
	if err := checkName(name); err != nil {
		panic("ratelimit: Name: " + err.Error())
	}
	return unnamedPrefix + encodeName(name) + "#"
}

// checkName returns why name cannot name a limiter or a quota, or nil: a
// name is at most maxName bytes of visible ASCII without '"' or '\', so
// that it goes into the RateLimit header fields as it is.
func checkName(name string) error {
	if len(name) > maxName {
		return fmt.Errorf("must be at most %d bytes, got %d", maxName, len(name))
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x21 || c > 0x7e || c == '"' || c == '\\' {
			return fmt.Errorf("must be visible ASCII without '\"' or '\\', got %q", name)
		}
	}
	return nil
}

// encodeName is a checked name as it goes into keys: the bytes that a
// tenant's part escapes are escaped alike.
func encodeName(name string) string {
	var b []byte
	for i := 0; i < len(name); i++ {
		if c := name[i]; safeKeyByte[c] {
			b = append(b, c)
		} else {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&0xf])
		}
	}
	return string(b)
}

// appendKey appends to dst the key of tenant id under a limiter's prefix
// (from keyPrefix), counted by algo; id "" is a request without a tenant.
func appendKey(dst []byte, prefix, id string, algo Algorithm) []byte {
	if algo == SlidingWindow {
		return append(appendTenantKey(append(dst, '{'), prefix, id), '}')
	}
	return appendTenantKey(dst, prefix, id)
}

// appendTenantKey appends the key of tenant id under prefix.
func appendTenantKey(dst []byte, prefix, id string) []byte {
	dst = append(dst, prefix...)
	if id == "" {
		return append(dst, unknownTenant...)
	}
	n := len(id)
	for i := 0; i < len(id); i++ {
		if !safeKeyByte[id[i]] {
			n += 2
		}
	}
	switch {
	case n > maxTenantKey:
		sum := sha256.Sum256([]byte(id))
		dst = append(dst, '#')
		return hex.AppendEncode(dst, sum[:])
	case n == len(id) && id != unknownTenant:
		return append(dst, id...)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if safeKeyByte[c] && !(i == 0 && id == unknownTenant) {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&0xf])
	}
	return dst
}

// appendAddrKey appends to dst the key of a request without a tenant from
// the client at addr, under a limiter's prefix: IPv4 by address, IPv6 by
// its first v6Bits bits. An invalid address is the key of no tenant.
func appendAddrKey(dst []byte, prefix string, addr netip.Addr, v6Bits int, algo Algorithm) []byte {
	addr = addr.Unmap()
	if !addr.IsValid() {
		return appendKey(dst, prefix, "", algo)
	}
	if algo == SlidingWindow {
		dst = append(dst, '{')
	}
	dst = append(dst, prefix...)
	dst = append(dst, "#ip:"...)
	if addr.Is4() {
		dst = addr.AppendTo(dst)
	} else {
		p, _ := addr.WithZone("").Prefix(v6Bits) // v6Bits is within 1..128
		dst = p.AppendTo(dst)
	}
	if algo == SlidingWindow {
		dst = append(dst, '}')
	}
	return dst
}

// appendProbeKey appends to dst the key under a limiter's prefix that
// Limiter.Ping counts on, "#ping": no tenant's part starts with '#' but a
// digest's, whose next byte is a hex digit, and an address's "#ip:".
func appendProbeKey(dst []byte, prefix string, algo Algorithm) []byte {
	if algo == SlidingWindow {
		dst = append(dst, '{')
	}
	dst = append(append(dst, prefix...), "#ping"...)
	if algo == SlidingWindow {
		dst = append(dst, '}')
	}
	return dst
}

// Key returns the key a store counts r under (see the package doc):
// "rl:<tenant>", "rl:<name>#<tenant>" for a named limiter, in braces for
// a sliding window, and the others this file describes.
func (r *Request) Key() string {
	var buf [maxKeyLen]byte
	return string(r.appendKey(buf[:0]))
}

// appendKey appends r's key to dst, which a caller keeps on its stack.
func (r *Request) appendKey(dst []byte) []byte {
	if r.probe || r.key.byAddr || r.key.prefix == "" {
		return r.appendOtherKey(dst)
	}
	return appendKey(dst, r.key.prefix, r.Tenant, r.Algorithm)
}

// appendOtherKey is appendKey for a probe's key, an address's, or a
// request of its own (no limiter's prefix): apart, so that the usual key's
// code stays short.
func (r *Request) appendOtherKey(dst []byte) []byte {
	prefix := r.key.prefix
	if prefix == "" {
		prefix = unnamedPrefix
	}
	switch {
	case r.probe:
		return appendProbeKey(dst, prefix, r.Algorithm)
	case r.key.byAddr:
		return appendAddrKey(dst, prefix, r.key.addr, int(r.key.v6Bits), r.Algorithm)
	}
	return appendKey(dst, prefix, r.Tenant, r.Algorithm)
}
