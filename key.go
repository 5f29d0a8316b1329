package ratelimit

import (
	"net/netip"

	"github.com/gatewaykit/ratelimit/internal/keys"
)

// The keys a store counts under: internal/keys builds them, and its
// package doc says how (a limiter's prefix and the tenant's part, one to
// one, escaped, bounded, in braces for a sliding window's tag).

const (
	maxTenantKey  = keys.MaxTenant // the longest encoded tenant ID kept as is
	maxName       = keys.MaxName   // the longest Name
	unnamedPrefix = keys.Unnamed   // the prefix of an unnamed limiter's keys
	maxKeyLen     = keys.MaxLen    // the longest key: a stack buffer holds any
	// unknownKey is the unnamed limiter's bucket of requests without a
	// tenant.
	unknownKey = unnamedPrefix + "unknown"
)

// keyPrefix returns the prefix of the keys of a limiter named name. It
// panics, naming Name, when name cannot be one.
func keyPrefix(name string) string {
	p, err := keys.Prefix(name)
	if err != nil {
		panic("ratelimit: Name: " + err.Error())
	}
	return p
}

// checkName returns why name cannot name a limiter or a quota, or nil.
func checkName(name string) error { return keys.CheckName(name) }

// appendKey appends to dst the key of tenant id under prefix, counted by
// algo.
func appendKey(dst []byte, prefix, id string, algo Algorithm) []byte {
	return keys.Append(dst, prefix, id, algo == SlidingWindow)
}

// appendAddrKey appends to dst the key of a request without a tenant from
// the client at addr, its IPv6 prefix v6Bits long.
func appendAddrKey(dst []byte, prefix string, addr netip.Addr, v6Bits int, algo Algorithm) []byte {
	return keys.AppendAddr(dst, prefix, addr, v6Bits, algo == SlidingWindow)
}

// appendProbeKey appends to dst the key that Limiter.Ping counts on.
func appendProbeKey(dst []byte, prefix string, algo Algorithm) []byte {
	return keys.AppendProbe(dst, prefix, algo == SlidingWindow)
}
