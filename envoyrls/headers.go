package envoyrls

import (
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/gatewaykit/ratelimit"
)

// headers are the IETF RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers-11) of a call: an item in each
// for every descriptor that a limit decided, named by its rate_limit's
// name, or else by its rule's path. A policy's window and a reset are
// whole seconds, rounded up.
func (c *call) headers() []*corev3.HeaderValue {
	var policy, state strings.Builder
	for i := range c.ds {
		d := &c.ds[i]
		if d.r == nil || d.r.unlimited || !d.figures {
			continue
		}
		name := itemName(d.r)
		window := d.window
		if window <= 0 {
			window = nominal(d.lim.unit)
		}
		if policy.Len() > 0 {
			policy.WriteString(", ")
			state.WriteString(", ")
		}
		policy.WriteString(name + ";q=" + strconv.FormatUint(uint64(d.lim.perUnit), 10) + ";w=" + seconds(window))
		state.WriteString(name + ";r=" + strconv.FormatUint(d.remaining, 10) + ";t=" + seconds(d.reset))
	}
	if policy.Len() == 0 {
		return nil
	}
	return []*corev3.HeaderValue{
		{Key: "RateLimit-Policy", Value: policy.String()},
		{Key: "RateLimit", Value: state.String()},
	}
}

// itemName is the name of r's items, as a structured field string: its
// rate_limit's name or its path, with any byte that a string cannot hold
// as is written as '_'.
func itemName(r *rule) string {
	name := r.limitName
	if name == "" {
		name = r.path
	}
	b := []byte(name)
	for i, c := range b {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			b[i] = '_'
		}
	}
	return `"` + string(b) + `"`
}

// seconds is d in whole seconds, rounded up.
func seconds(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

// nominal is the length of unit's window, or of its period of the
// calendar at its shortest.
func nominal(unit rlsv3.RateLimitResponse_RateLimit_Unit) time.Duration {
	if w, ok := windowOf(ratelimit.SlidingWindow, unit); ok {
		return w // SECOND to DAY
	}
	switch unit {
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return 7 * 24 * time.Hour
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return 28 * 24 * time.Hour
	}
	return 365 * 24 * time.Hour
}
