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
// Several limiters may decide one request (a global one, then a route's).
// Each appends its item to RateLimit-Policy and RateLimit, a list in the
// draft's syntax, while X-RateLimit-* and Retry-After report the most
// restrictive of them: the fewest requests left, and of those the latest
// reset. The limiters compare through the X-RateLimit-* fields already in
// the response, so with DisableLegacyHeaders each Retry-After is its own.

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

var (
	bLimit      = []byte(hLimit)
	bRemaining  = []byte(hRemaining)
	bReset      = []byte(hReset)
	bPolicy     = []byte(hPolicy)
	bRateLimit  = []byte(hRateLimit)
	bRetryAfter = []byte(hRetryAfter)
)

// headerSwitches are the header families a limiter writes.
type headerSwitches struct {
	legacy bool // X-RateLimit-*
	draft  bool // RateLimit-Policy and RateLimit
}

// policyHeaders is a budget that a request is counted against, the
// limiter's or its fallback's, with the values that never change formatted
// once.
type policyHeaders struct {
	headerSwitches
	limit      int64
	policy     string // the policy's name: Options.Name, or "default"
	limitValue string // X-RateLimit-Limit
	policyItem string // the item of RateLimit-Policy: "name";q=limit;w=window
	name       string // the policy's name as an sf-string: "name"

	// limitValue and policyItem for fasthttp, which copies bytes.
	limitBytes, policyItemBytes []byte
}

func newPolicyHeaders(name string, limit int, window time.Duration, h headerSwitches) policyHeaders {
	if name == "" {
		name = "default"
	}
	// keyPrefix has checked that the name needs no escaping.
	quoted := `"` + name + `"`
	p := policyHeaders{
		headerSwitches: h,
		limit:          int64(limit),
		policy:         name,
		limitValue:     strconv.Itoa(limit),
		policyItem:     quoted + ";q=" + strconv.Itoa(limit) + ";w=" + strconv.FormatInt(ceilDiv(window, time.Second), 10),
		name:           quoted,
	}
	p.limitBytes, p.policyItemBytes = []byte(p.limitValue), []byte(p.policyItem)
	return p
}

// figures returns what the fields report: the requests remaining (-1 when
// nothing counted) and the seconds until the window ends, rounded up.
func (d *Decision) figures() (remaining, reset int64) {
	if d.By == ByNone {
		return -1, 0
	}
	return int64(d.Remaining), ceilDiv(d.Reset, time.Second)
}

// retryAfter reports whether the response to d carries Retry-After: a
// refusal by a counter, not by FailClosed.
func (d *Decision) retryAfter() bool { return !d.Allowed && d.By != ByNone }

// SetFastHTTPHeaders writes d's fields into h, the response header of a
// door on fasthttp (Fiber v2's and v3's c.Response().Header), as
// SetHeaders does into an http.Header.
func (d *Decision) SetFastHTTPHeaders(h *fasthttp.ResponseHeader) {
	p := d.policy
	if p == nil || (!p.legacy && !p.draft && !d.retryAfter()) {
		return // the zero Decision, or nothing to write
	}
	remaining, reset := d.figures()
	retry := reset
	var buf [128]byte
	if p.legacy {
		switch prev, ok := parseCount(h.PeekCanonical(bRemaining)); {
		case remaining < 0:
			if len(h.PeekCanonical(bLimit)) == 0 {
				h.SetCanonical(bLimit, p.limitBytes)
			}
		case ok && earlierWins(prev, h.PeekCanonical(bReset), remaining, reset):
			retry, _ = parseCount(h.PeekCanonical(bReset))
		default:
			h.SetCanonical(bLimit, p.limitBytes)
			h.SetCanonical(bRemaining, strconv.AppendInt(buf[:0], remaining, 10))
			h.SetCanonical(bReset, strconv.AppendInt(buf[:0], reset, 10))
		}
	}
	if p.draft {
		appendItem(h, bPolicy, p.policyItemBytes)
		if remaining >= 0 {
			appendItem(h, bRateLimit, appendRateLimitItem(buf[:0], p, remaining, reset))
		}
	}
	if d.retryAfter() {
		h.SetCanonical(bRetryAfter, strconv.AppendInt(buf[:0], retry, 10))
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
	p := d.policy
	if p == nil || (!p.legacy && !p.draft && !d.retryAfter()) {
		return // the zero Decision, or nothing to write
	}
	remaining, reset := d.figures()
	retry := reset
	legacy := p.legacy && remaining >= 0
	if legacy {
		if prev, ok := parseCount(first(h[hRemaining])); ok && earlierWins(prev, first(h[hReset]), remaining, reset) {
			retry, _ = parseCount(first(h[hReset]))
			legacy = false
		}
	}
	// The figures share one string and the values one array: a response
	// costs two allocations, not two per field.
	var buf [160]byte
	b := strconv.AppendInt(buf[:0], remaining, 10)
	endRemaining := len(b)
	b = strconv.AppendInt(b, reset, 10)
	endReset := len(b)
	b = strconv.AppendInt(b, retry, 10)
	endRetry := len(b)
	figures := string(appendRateLimitItem(b, p, remaining, reset))
	values := new([6]string)
	set := func(i int, field, value string) {
		values[i] = value
		h[field] = values[i : i+1 : i+1]
	}
	switch {
	case legacy:
		set(0, hLimit, p.limitValue)
		set(1, hRemaining, figures[:endRemaining])
		set(2, hReset, figures[endRemaining:endReset])
	case p.legacy && remaining < 0 && len(h[hLimit]) == 0:
		set(0, hLimit, p.limitValue)
	}
	if p.draft {
		set(3, hPolicy, joinItem(first(h[hPolicy]), p.policyItem))
		if remaining >= 0 {
			set(4, hRateLimit, joinItem(first(h[hRateLimit]), figures[endRetry:]))
		}
	}
	if d.retryAfter() {
		set(5, hRetryAfter, figures[endReset:endRetry])
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

// appendRateLimitItem appends the item of the RateLimit field:
// "name";r=remaining;t=reset.
func appendRateLimitItem(b []byte, p *policyHeaders, remaining, reset int64) []byte {
	b = append(b, p.name...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, remaining, 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, reset, 10)
}

// appendItem adds item to the list in field, or sets it when there is none.
func appendItem(h *fasthttp.ResponseHeader, field, item []byte) {
	prev := h.PeekCanonical(field)
	if len(prev) == 0 {
		h.SetCanonical(field, item)
		return
	}
	var buf [256]byte
	v := append(buf[:0], prev...)
	v = append(v, ", "...)
	h.SetCanonical(field, append(v, item...))
}

// joinItem appends item to the list prev, which may be empty.
func joinItem(prev, item string) string {
	if prev == "" {
		return item
	}
	return prev + ", " + item
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
