package ratelimit

import (
	"net/http"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// A response carries three families of rate limit fields:
//
//   - X-RateLimit-Limit, -Remaining and -Reset, which predate any standard;
//   - RateLimit-Policy and RateLimit, from draft-ietf-httpapi-ratelimit-headers-11:
//     `"default";q=100;w=60` and `"default";r=42;t=17`;
//   - Retry-After on a refusal.
//
// Several limiters may decide one request (a global one, then a route's):
// plan decides what each writes, and SetHeaders and SetFastHTTPHeaders
// only write it.

// Header names in canonical form (fasthttp's and net/http's agree), so
// that SetCanonical stores them exactly as c.Set would and a later c.Set
// replaces rather than duplicates them.
const (
	hLimit      = "X-Ratelimit-Limit"
	hRemaining  = "X-Ratelimit-Remaining"
	hReset      = "X-Ratelimit-Reset"
	hPolicy     = "Ratelimit-Policy"
	hRateLimit  = "Ratelimit"
	hRetryAfter = "Retry-After"
)

// figures returns what the fields report: the requests remaining (-1 when
// nothing counted) and the seconds until the window ends, rounded up.
func (d *Decision) figures() (remaining, reset int64) {
	if d.Remaining < 0 { // nothing counted, or a cost past the limit
		return -1, 0
	}
	return int64(d.Remaining), ceilDiv(d.Reset, time.Second)
}

// retryAfter reports whether the response to d carries Retry-After: a
// refusal by a counter of a request that can fit later, not one by
// FailClosed, nor one whose cost passes the limit.
func (d *Decision) retryAfter() bool { return !d.Allowed && d.By != ByNone && d.Remaining >= 0 }

// The fields a Decision writes, in the order plan decides them.
const (
	fLimit = iota
	fRemaining
	fReset
	fPolicy
	fRateLimit
	fRetryAfter
	numFields
)

var (
	fieldNames     = [numFields]string{hLimit, hRemaining, hReset, hPolicy, hRateLimit, hRetryAfter}
	fieldNameBytes = [numFields][]byte{[]byte(hLimit), []byte(hRemaining), []byte(hReset),
		[]byte(hPolicy), []byte(hRateLimit), []byte(hRetryAfter)}
)

// fieldValues is what plan decided a Decision writes: the value of each
// field it sets, nil for a field it leaves alone. A value is a constant of
// the policy's (its bit set in fixed), or was appended to buf at at[i].
type fieldValues struct {
	vals  [numFields][]byte
	buf   []byte
	at    [numFields]int
	fixed uint8
}

// plan decides the fields that d writes into a response, appending the
// values it formats to buf. earlier returns the value of field i that an
// earlier limiter wrote into the same response, empty if none; plan reads
// only those it needs. This is the whole rule for several limiters on one
// request: each appends its item to RateLimit-Policy and RateLimit, while
// X-RateLimit-* and Retry-After report the most restrictive of them, the
// fewest requests left and of those the latest reset, compared through the
// X-RateLimit-* fields already in the response (so with
// DisableLegacyHeaders each Retry-After is its own). When nothing counted
// the request, only the limit and the policy are known. A limiter in
// shadow mode writes nothing.
func plan[T string | []byte](d *Decision, buf []byte, earlier func(i int) T) fieldValues {
	v := fieldValues{buf: buf}
	p := d.policy
	if p == nil || p.shadow {
		return v // the zero Decision, or nothing to write
	}
	remaining, reset := d.figures()
	var earlierRetry int64         // an earlier limiter's Retry-After, when it wins
	add := func(i int, b []byte) { // field i's value is what b appended to v.buf
		v.vals[i], v.at[i], v.buf = b[len(v.buf):], len(v.buf), b
	}
	// The policy's own budget was formatted once; a tenant's own plan, or
	// the fallback's budget for it, is formatted for the request.
	own := int64(d.Limit) == p.limit && d.Window == p.window
	limit := func() {
		if own {
			v.vals[fLimit], v.fixed = p.limitBytes, v.fixed|1<<fLimit
			return
		}
		add(fLimit, strconv.AppendInt(v.buf, int64(d.Limit), 10))
	}
	if p.legacy {
		switch prev, ok := parseCount(earlier(fRemaining)); {
		case remaining < 0:
			if len(earlier(fLimit)) == 0 {
				limit()
			}
		case ok && earlierWins(prev, earlier(fReset), remaining, reset):
			earlierRetry, _ = parseCount(earlier(fReset))
		default:
			limit()
			add(fRemaining, strconv.AppendInt(v.buf, remaining, 10))
			add(fReset, strconv.AppendInt(v.buf, reset, 10))
		}
	}
	if p.draft && d.quotas != nil {
		add(fPolicy, d.appendPolicyItems(appendList(v.buf, earlier(fPolicy))))
		if remaining >= 0 {
			add(fRateLimit, d.appendRateLimitItems(appendList(v.buf, earlier(fRateLimit))))
		}
	} else if p.draft {
		switch prev := earlier(fPolicy); {
		case len(prev) == 0 && own:
			v.vals[fPolicy], v.fixed = p.policyItemBytes, v.fixed|1<<fPolicy
		case own:
			add(fPolicy, append(appendList(v.buf, prev), p.policyItem...))
		default:
			add(fPolicy, appendPolicyItem(appendList(v.buf, prev), p.name, int64(d.Limit), p.itemWindow(d.Window)))
		}
		if remaining >= 0 {
			add(fRateLimit, appendRateLimitItem(appendList(v.buf, earlier(fRateLimit)), p.name, remaining, reset))
		}
	}
	if d.retryAfter() {
		add(fRetryAfter, strconv.AppendInt(v.buf, max(ceilDiv(d.RetryAfter, time.Second), earlierRetry), 10))
	}
	return v
}

// appendList appends the items of an earlier limiter, prev, and the
// separator before the next item, when there are any.
func appendList[T string | []byte](b []byte, prev T) []byte {
	if len(prev) == 0 {
		return b
	}
	b = append(b, prev...)
	return append(b, ", "...)
}

// SetFastHTTPHeaders writes d's fields into h, the response header of a
// middleware on fasthttp (Fiber v2's and v3's c.Response().Header), as
// SetHeaders does into an http.Header.
func (d *Decision) SetFastHTTPHeaders(h *fasthttp.ResponseHeader) {
	if d.quotas != nil {
		// Every limit's items: room for them on the stack.
		var buf [512]byte
		d.setFastHTTPHeaders(h, buf[:0])
		return
	}
	var buf [128]byte
	d.setFastHTTPHeaders(h, buf[:0])
}

func (d *Decision) setFastHTTPHeaders(h *fasthttp.ResponseHeader, buf []byte) {
	v := plan(d, buf, func(i int) []byte { return h.PeekCanonical(fieldNameBytes[i]) })
	for i := range v.vals {
		if b := v.vals[i]; b != nil {
			h.SetCanonical(fieldNameBytes[i], b)
		}
	}
}

// SetHeaders writes d's fields into h: X-RateLimit-Limit, -Remaining and
// -Reset, RateLimit-Policy and RateLimit (each family unless Options turn
// it off), and Retry-After when a counter refused the request. When
// nothing counted the request (By is ByNone), only the limit and the
// policy are known, and only they are written.
//
// When an earlier limiter has written its fields into h, d's item is
// appended to RateLimit-Policy and RateLimit, and X-RateLimit-* and
// Retry-After keep reporting the more restrictive of the two.
func (d *Decision) SetHeaders(h http.Header) {
	var buf [256]byte
	v := plan(d, buf[:0], func(i int) string { return first(h[fieldNames[i]]) })
	if v.fixed == 0 && len(v.buf) == 0 {
		return
	}
	// The values formatted for the request share one string, and all of
	// them one array: a response costs two allocations, not two per field.
	formatted := string(v.buf)
	values := new([numFields]string)
	for i := range v.vals {
		switch {
		case v.vals[i] == nil:
			continue
		case v.fixed&(1<<i) == 0:
			values[i] = formatted[v.at[i] : v.at[i]+len(v.vals[i])]
		case i == fLimit:
			values[i] = d.policy.limitValue
		default:
			values[i] = d.policy.policyItem
		}
		h[fieldNames[i]] = values[i : i+1 : i+1]
	}
}

// earlierWins reports whether the figures an earlier limiter reported,
// prevRemaining and the field prevReset, are more restrictive than
// remaining and reset: fewer requests left, or as few and a reset no
// sooner.
func earlierWins[T string | []byte](prevRemaining int64, prevReset T, remaining, reset int64) bool {
	if prevRemaining != remaining {
		return prevRemaining < remaining
	}
	r, _ := parseCount(prevReset)
	return r >= reset
}

// appendPolicyItems appends the items of RateLimit-Policy of d, which has
// quotas: its main limit's, then each quota's, a calendar period's w being
// the period's length.
func (d *Decision) appendPolicyItems(b []byte) []byte {
	p := d.policy
	if m := d.lims[0]; m.limit == p.limit && m.window == p.window {
		b = append(b, p.policyItem...)
	} else {
		b = appendPolicyItem(b, p.name, m.limit, m.window)
	}
	return append(b, d.quotas.policyItems(&d.lims)...)
}

// appendRateLimitItems appends the items of RateLimit of d, which has
// quotas and was counted: every limit's.
func (d *Decision) appendRateLimitItems(b []byte) []byte {
	m := &d.lims[0]
	b = appendRateLimitItem(b, d.policy.name, m.remaining, ceilDiv(m.reset, time.Second))
	for i, q := range d.quotas.q {
		f := &d.lims[i+1]
		b = appendRateLimitItem(append(b, ", "...), q.quoted, f.remaining, ceilDiv(f.reset, time.Second))
	}
	return b
}

// appendRateLimitItem appends the item of the RateLimit field:
// "name";r=remaining;t=reset.
func appendRateLimitItem(b []byte, name string, remaining, reset int64) []byte {
	b = append(b, name...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, remaining, 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, reset, 10)
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// parseCount parses a header value of decimal digits, as the setters write
// them.
func parseCount[T string | []byte](b T) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
