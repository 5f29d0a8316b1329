package ratelimit

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// tenantKey is the unnamed limiter's key of id.
func tenantKey(id string) string {
	var buf [maxKeyLen]byte
	return string(appendKey(buf[:0], unnamedPrefix, id, FixedWindow))
}

func TestTenantKey(t *testing.T) {
	long := strings.Repeat("a", maxTenantKey+1)
	tests := []struct {
		name, id, want string
	}{
		{"plain", "acme", "rl:acme"},
		{"no tenant", "", "rl:unknown"},
		{"tenant named unknown", "unknown", "rl:%75nknown"},
		{"prefix of unknown", "unknow", "rl:unknow"},
		{"unknown with more", "unknown2", "rl:unknown2"},
		{"braces", "{acme}", "rl:%7Bacme%7D"},
		{"lone brace", "a{b", "rl:a%7Bb"},
		{"percent", "a%7Bb", "rl:a%257Bb"},
		{"hash", "#abc", "rl:%23abc"},
		{"space and newline", "a b\nc", "rl:a%20b%0Ac"},
		{"quote and equals", `a"b=c`, `rl:a"b=c`},
		{"colon and slash", "org:1/team", "rl:org:1/team"},
		{"NUL and DEL", "a\x00\x7f", "rl:a%00%7F"},
		{"UTF-8", "café", "rl:caf%C3%A9"},
		{"invalid UTF-8", "\xff", "rl:%FF"},
		{"128 bytes kept", long[:maxTenantKey], "rl:" + long[:maxTenantKey]},
		{"129 bytes digested", long, "rl:#" + sha256Hex(long)},
		{"short but long once encoded", strings.Repeat("\n", 43), "rl:#" + sha256Hex(strings.Repeat("\n", 43))},
		{"42 newlines fit", strings.Repeat("\n", 42), "rl:" + strings.Repeat("%0A", 42)},
		{"1 MB", strings.Repeat("x", 1<<20), "rl:#" + sha256Hex(strings.Repeat("x", 1<<20))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tenantKey(tt.id); got != tt.want {
				t.Errorf("tenantKey(%.40q) = %q, want %q", tt.id, got, tt.want)
			}
		})
	}
}

// IDs that an encoding or a truncation could easily confuse must keep keys
// of their own.
func TestTenantKeysDoNotCollide(t *testing.T) {
	long := strings.Repeat("z", 200)
	ids := []string{
		"", "unknown", "%75nknown", "Unknown", "unknown ",
		"a{b", "a%7Bb", "a%7bb", "a%257Bb",
		"#" + sha256Hex(long), long, long + "z", long[:maxTenantKey], long[:maxTenantKey+1],
		"a\x00", "a", "a%00", "é", "%C3%A9",
	}
	seen := map[string]string{}
	for _, id := range ids {
		k := tenantKey(id)
		if prev, ok := seen[k]; ok {
			t.Errorf("tenants %q and %q share key %q", prev, id, k)
		}
		seen[k] = id
	}
}

func TestNamedKeys(t *testing.T) {
	long := strings.Repeat("a", maxTenantKey+1)
	tests := []struct{ name, id, want string }{
		{"", "acme", "rl:acme"},
		{"", "", "rl:unknown"},
		{"global", "acme", "rl:global#acme"},
		{"global", "", "rl:global#unknown"},
		{"global", "unknown", "rl:global#%75nknown"},
		{"global", "a{b}#c", "rl:global#a%7Bb%7D%23c"},
		{"global", long, "rl:global##" + sha256Hex(long)},
		{"a#b{c}%", "acme", "rl:a%23b%7Bc%7D%25#acme"},
		{strings.Repeat("n", maxName), "x", "rl:" + strings.Repeat("n", maxName) + "#x"},
	}
	for _, tt := range tests {
		var buf [maxKeyLen]byte
		if got := string(appendKey(buf[:0], keyPrefix(tt.name), tt.id, FixedWindow)); got != tt.want {
			t.Errorf("key of name %q, tenant %.20q = %q, want %q", tt.name, tt.id, got, tt.want)
		}
	}
	// The longest name, all escaped, and the longest tenant part stay
	// within the stack buffer's bound.
	var buf [maxKeyLen]byte
	k := appendKey(buf[:0], keyPrefix(strings.Repeat("#", maxName)), strings.Repeat("b", maxTenantKey), SlidingWindow)
	if len(k) != maxKeyLen {
		t.Errorf("longest key is %d bytes, want maxKeyLen %d", len(k), maxKeyLen)
	}
}

// A named limiter's keys never meet an unnamed one's, nor another name's,
// whatever tenants they see.
func TestNamedKeysDoNotCollide(t *testing.T) {
	pairs := [][2]string{ // name, tenant
		{"", "global#acme"}, {"global", "acme"},
		{"", "global%23acme"}, {"", "global"},
		{"glo", "bal#acme"}, {"glo#bal", "acme"},
		{"a", "b#c"}, {"a#b", "c"},
		{"", "#" + sha256Hex("x")}, {"x", ""}, {"x", "unknown"}, {"", "x#unknown"},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		var buf [maxKeyLen]byte
		k := string(appendKey(buf[:0], keyPrefix(p[0]), p[1], FixedWindow))
		if prev, ok := seen[k]; ok {
			t.Errorf("name %q tenant %q and name %q tenant %q share key %q", prev[0], prev[1], p[0], p[1], k)
		}
		seen[k] = p
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// decodeTenantKey inverts tenantKey for keys that are not digests; it is the
// test's proof that the encoding is one to one.
func decodeTenantKey(key string) (id string, digest bool, err error) {
	s, ok := strings.CutPrefix(key, "rl:")
	if !ok {
		return "", false, strconv.ErrSyntax
	}
	if key == unknownKey {
		return "", false, nil
	}
	if strings.HasPrefix(s, "#") {
		return "", true, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false, strconv.ErrSyntax
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false, err
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), false, nil
}

// escapedLen is the length of id once escaped, worked out apart from
// appendKey: printable ASCII but '%', '{', '}' and '#' takes one byte,
// any other byte three, and "unknown" gets its 'u' escaped.
func escapedLen(id string) int {
	n := 0
	for _, c := range []byte(id) {
		if c > ' ' && c < 0x7f && !strings.ContainsRune("%{}#", rune(c)) {
			n++
		} else {
			n += 3
		}
	}
	if id == "unknown" {
		n += 2
	}
	return n
}

func FuzzTenantKey(f *testing.F) {
	a := func(n int) string { return strings.Repeat("a", n) }
	for _, s := range []string{
		"acme", "", "unknown", "{a}b", "a%b", "#x", "a\nb", "é", a(129),
		// Each side of the bound, with escapes of one and of two bytes.
		a(128), a(125) + "{", a(126) + "{", a(122) + "é", a(123) + "é",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		key := tenantKey(id)
		if len(key) > len("rl:")+maxTenantKey {
			t.Fatalf("tenantKey(%q) = %d bytes, more than %d", id, len(key), len("rl:")+maxTenantKey)
		}
		for i := 0; i < len(key); i++ {
			if c := key[i]; c < 0x21 || c > 0x7e || c == '{' || c == '}' {
				t.Fatalf("tenantKey(%q) = %q holds byte %#x", id, key, c)
			}
		}
		got, digest, err := decodeTenantKey(key)
		if err != nil {
			t.Fatalf("tenantKey(%q) = %q does not decode: %v", id, key, err)
		}
		if n := escapedLen(id); digest != (n > maxTenantKey) {
			t.Fatalf("tenantKey(%.40q, %d bytes) = %.50q: the ID escapes to %d bytes, so want a digest exactly when that is over %d",
				id, len(id), key, n, maxTenantKey)
		}
		switch {
		case digest:
			if key != "rl:#"+sha256Hex(id) {
				t.Fatalf("tenantKey(%q) = %q, not the ID's digest", id, key)
			}
		case got != id:
			t.Fatalf("tenantKey(%q) = %q decodes to %q", id, key, got)
		case id != "" && key == unknownKey:
			t.Fatalf("tenant %q shares the anonymous bucket", id)
		}
	})
}

func TestAddrKey(t *testing.T) {
	tests := []struct {
		addr   string // "" is the zero Addr
		bits   int
		prefix string
		want   string
	}{
		{"203.0.113.9", 64, "rl:", "rl:#ip:203.0.113.9"},
		{"::ffff:203.0.113.9", 64, "rl:", "rl:#ip:203.0.113.9"},
		{"2001:db8:1:2:3:4:5:6", 64, "rl:", "rl:#ip:2001:db8:1:2::/64"},
		{"2001:db8:1:2:3:4:5:6", 48, "rl:", "rl:#ip:2001:db8:1::/48"},
		{"2001:db8:1:2:3:4:5:6", 128, "rl:", "rl:#ip:2001:db8:1:2:3:4:5:6/128"},
		{"fe80::1%eth0", 64, "rl:", "rl:#ip:fe80::/64"},
		{"203.0.113.9", 64, "rl:api#", "rl:api##ip:203.0.113.9"},
		{"", 64, "rl:", "rl:unknown"},
		{"", 64, "rl:api#", "rl:api#unknown"},
	}
	for _, tt := range tests {
		var addr netip.Addr
		if tt.addr != "" {
			addr = netip.MustParseAddr(tt.addr)
		}
		if got := string(appendAddrKey(nil, tt.prefix, addr, tt.bits, FixedWindow)); got != tt.want {
			t.Errorf("appendAddrKey(%q, %s, /%d, FixedWindow) = %q, want %q", tt.prefix, tt.addr, tt.bits, got, tt.want)
		}
	}
}
