package ratelimit

import (
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
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

// Header names in fasthttp's normalized form, so that SetCanonical stores
// them exactly as c.Set would and a later c.Set replaces rather than
// duplicates them.
var (
	hLimit      = []byte("X-Ratelimit-Limit")
	hRemaining  = []byte("X-Ratelimit-Remaining")
	hReset      = []byte("X-Ratelimit-Reset")
	hPolicy     = []byte("Ratelimit-Policy")
	hRateLimit  = []byte("Ratelimit")
	hRetryAfter = []byte("Retry-After")
)

// policyHeaders is a budget that a request is counted against, the
// limiter's or its fallback's, with the values that never change formatted
// once.
type policyHeaders struct {
	limit      int64
	limitValue []byte // X-RateLimit-Limit
	policyItem []byte // the item of RateLimit-Policy: "name";q=limit;w=window
	name       []byte // the policy's name as an sf-string: "name"
}

func newPolicyHeaders(name string, limit int, window time.Duration) policyHeaders {
	if name == "" {
		name = "default"
	}
	// keyPrefix has checked that the name needs no escaping.
	quoted := []byte(`"` + name + `"`)
	item := append([]byte(nil), quoted...)
	item = append(item, ";q="...)
	item = strconv.AppendInt(item, int64(limit), 10)
	item = append(item, ";w="...)
	item = strconv.AppendInt(item, ceilDiv(window, time.Second), 10)
	return policyHeaders{
		limit:      int64(limit),
		limitValue: strconv.AppendInt(nil, int64(limit), 10),
		policyItem: item,
		name:       quoted,
	}
}

// setHeaders sets the enabled header families for a request counted
// against p; reset is the seconds left in the window. A negative remaining
// means no counter counted: the limit and policy are known, the rest is not.
// It returns the seconds until a retry can pass: reset, or the later reset
// of a more restrictive limiter before it, which X-RateLimit-Reset then
// reports.
func (l *limiter) setHeaders(c *fiber.Ctx, p *policyHeaders, remaining, reset int64) (retry int64) {
	h := &c.Response().Header
	retry = reset
	if !l.cfg.DisableLegacyHeaders {
		retry = setLegacy(h, p, remaining, reset)
	}
	if !l.cfg.DisableDraftHeaders {
		appendItem(h, hPolicy, p.policyItem)
		if remaining >= 0 {
			var buf [128]byte
			item := append(buf[:0], p.name...)
			item = append(item, ";r="...)
			item = strconv.AppendInt(item, remaining, 10)
			item = append(item, ";t="...)
			appendItem(h, hRateLimit, strconv.AppendInt(item, reset, 10))
		}
	}
	return retry
}

// setLegacy sets X-RateLimit-* to p's figures unless an earlier limiter's,
// already there, are more restrictive, and returns the reset the fields
// then report.
func setLegacy(h *fasthttp.ResponseHeader, p *policyHeaders, remaining, reset int64) int64 {
	if remaining < 0 {
		if len(h.PeekCanonical(hLimit)) == 0 {
			h.SetCanonical(hLimit, p.limitValue)
		}
		return reset
	}
	if prevRemaining, ok := parseCount(h.PeekCanonical(hRemaining)); ok {
		prevReset, _ := parseCount(h.PeekCanonical(hReset))
		if prevRemaining < remaining || (prevRemaining == remaining && prevReset >= reset) {
			return prevReset
		}
	}
	var buf [20]byte
	h.SetCanonical(hLimit, p.limitValue)
	h.SetCanonical(hRemaining, strconv.AppendInt(buf[:0], remaining, 10))
	h.SetCanonical(hReset, strconv.AppendInt(buf[:0], reset, 10))
	return reset
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

// parseCount parses a header value of decimal digits, as setHeaders writes
// them.
func parseCount(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
