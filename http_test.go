package ratelimit

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func TestRemoteAddr(t *testing.T) {
	tests := []struct{ remote, want string }{
		{"203.0.113.9:41000", "203.0.113.9"},
		{"[2001:db8::1]:41000", "2001:db8::1"},
		{"[fe80::1%eth0]:41000", "fe80::1%eth0"},
		{"203.0.113.9", "203.0.113.9"}, // no port, as some test servers set it
		{"pipe", ""},                   // not an address: counts under rl:unknown
		{"", ""},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.remote
		var want netip.Addr
		if tt.want != "" {
			want = netip.MustParseAddr(tt.want)
		}
		if got := remoteAddr(r); got != want {
			t.Errorf("remoteAddr(%q) = %v, want %v", tt.remote, got, want)
		}
	}
}

func TestHTTPMiddlewareNeedsLimiter(t *testing.T) {
	defer func() {
		if msg, _ := recover().(string); !strings.HasPrefix(msg, "ratelimit: HTTPMiddleware needs a Limiter") {
			t.Fatalf("panic = %q, want one that names the missing Limiter", msg)
		}
	}()
	HTTPMiddleware(nil, HTTPConfig{})
}
