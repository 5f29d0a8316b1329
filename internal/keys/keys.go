// Package keys builds the keys a limiter counts under, from a limiter's
// name and a tenant's ID, an address or the probe of Limiter.Ping: one
// to one, bounded, escaped, and free of braces a tenant could choose.
package keys

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
//   - A tenant ID whose encoded form is longer than MaxTenant bytes
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
//   - A TokenBucket limiter's key is the fixed window's too, holding on
//     Redis the time its bucket is full again.
//
// An ID of safe bytes, as most are, costs one scan and a copy.

// MaxTenant is the longest encoded tenant ID kept as is.
const MaxTenant = 128

// MaxName is the longest Name; encoded, it takes at most three
// times as many bytes.
const MaxName = 64

// Unnamed is the prefix of an unnamed limiter's keys.
const Unnamed = "rl:"

// unknownTenant is the tenant part of requests that have no tenant.
const unknownTenant = "unknown"

// MaxLen bounds every key Append builds, so that a caller can build
// it in a stack buffer.
const MaxLen = len("{rl:") + 3*MaxName + len("#") + MaxTenant + len("}")

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

// Prefix returns the prefix of the keys of a limiter named name, or why
// name cannot be one (see CheckName).
func Prefix(name string) (string, error) {
	if name == "" {
		return Unnamed, nil
	}
	if err := CheckName(name); err != nil {
		return "", err
	}
	return Unnamed + encodeName(name) + "#", nil
}

// CheckName returns why name cannot name a limiter or a quota, or nil: a
// name is at most MaxName bytes of visible ASCII without '"' or '\', so
// that it goes into the RateLimit header fields as it is.
func CheckName(name string) error {
	if len(name) > MaxName {
		return fmt.Errorf("must be at most %d bytes, got %d", MaxName, len(name))
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

// Append appends to dst the key of tenant id under a limiter's prefix
// (from Prefix), in braces for a sliding window's tag; id "" is a request without a tenant.
func Append(dst []byte, prefix, id string, braces bool) []byte {
	if braces {
		return append(appendTenant(append(dst, '{'), prefix, id), '}')
	}
	return appendTenant(dst, prefix, id)
}

// appendTenant appends the key of tenant id under prefix.
func appendTenant(dst []byte, prefix, id string) []byte {
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
	case n > MaxTenant:
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

// AppendAddr appends to dst the key of a request without a tenant from
// the client at addr, under a limiter's prefix: IPv4 by address, IPv6 by
// its first v6Bits bits. An invalid address is the key of no tenant.
func AppendAddr(dst []byte, prefix string, addr netip.Addr, v6Bits int, braces bool) []byte {
	addr = addr.Unmap()
	if !addr.IsValid() {
		return Append(dst, prefix, "", braces)
	}
	if braces {
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
	if braces {
		dst = append(dst, '}')
	}
	return dst
}

// AppendProbe appends to dst the key under a limiter's prefix that
// Limiter.Ping counts on, "#ping": no tenant's part starts with '#' but a
// digest's, whose next byte is a hex digit, and an address's "#ip:".
func AppendProbe(dst []byte, prefix string, braces bool) []byte {
	if braces {
		dst = append(dst, '{')
	}
	dst = append(append(dst, prefix...), "#ping"...)
	if braces {
		dst = append(dst, '}')
	}
	return dst
}
