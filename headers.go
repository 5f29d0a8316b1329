package ratelimit

import (
	"math/bits"
	"net/http"
	"strconv"
	"time"
	"unsafe"

	"github.com/gatewaykit/ratelimit/internal/headerfield"
	"github.com/gatewaykit/ratelimit/internal/window"

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
// planFields decides what each writes, and SetHeaders and SetFastHTTPHeaders
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
	return int64(d.Remaining), window.CeilDiv(d.Reset, time.Second)
}

// retryAfter reports whether the response to d carries Retry-After: a
// refusal by a counter of a request that can fit later, not one by
// FailClosed, nor one whose cost passes the limit.
func (d *Decision) retryAfter() bool { return !d.Allowed && d.By != ByNone && d.Remaining >= 0 }

// The fields a Decision writes, in the order planFields decides them.
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

// fieldValues is what planFields decided a Decision writes: the fields it sets
// (their bits in set), each a constant of the policy's (its bit also in
// fixed) or the bytes [at[i], end[i]) of the buffer that planFields appended
// to. It holds no pointer, so that the buffer can stay on its writer's
// stack.
type fieldValues struct {
	at, end    [numFields]int32
	set, fixed uint8
}

// has reports whether field i is set.
func (v *fieldValues) has(i uint) bool { return v.set&(1<<i) != 0 }

// constant returns field i's value when it is a constant of p's.
func (v *fieldValues) constant(i uint, p *policyHeaders) (b []byte, s string, ok bool) {
	switch {
	case v.fixed&(1<<i) == 0:
		return nil, "", false
	case i == fLimit:
		return p.limitBytes, p.limitValue, true
	}
	return p.policyItemBytes, p.policyItem, true
}

// planFields decides the fields that d writes into a response, appending the
// values it formats to buf, and returns buf. earlier returns the value of
// field i that an earlier limiter wrote into the same response, empty if
// none; planFields reads only those it needs. This is the whole rule for several
// limiters on one request: each appends its item to RateLimit-Policy and
// RateLimit, while X-RateLimit-* and Retry-After report the most
// restrictive of them, the fewest requests left and of those the latest
// reset, compared through the X-RateLimit-* fields already in the
// response (so with DisableLegacyHeaders each Retry-After is its own).
// Only limits of one kind compare: of a rate and an InFlight limit, the
// fields report the rate, the InFlight limit only when it refused the
// request; which kind the fields in the response are of, RateLimit-Policy
// says (headerfield.InFlight), and without it they count as a rate's.
// When nothing counted the request, only the limit and the policy are
// known. A limiter in shadow mode writes nothing.
func planFields[T string | []byte](d *Decision, buf []byte, earlier func(i int) T) (fieldValues, []byte) {
	p := d.policy
	if p == nil || p.shadow {
		return fieldValues{}, buf // the zero Decision, or nothing to write
	}
	if d.usual() && len(earlier(fRemaining)) == 0 && len(earlier(fPolicy)) == 0 && len(earlier(fRateLimit)) == 0 {
		// What planAll decides for it, in a few lines (see usual).
		var v fieldValues
		at := len(buf)
		buf, r, rEnd, t := d.appendUsualItem(buf)
		v.at[fRemaining], v.end[fRemaining] = int32(r), int32(rEnd)
		v.at[fReset], v.end[fReset] = int32(t), int32(len(buf))
		v.at[fRateLimit], v.end[fRateLimit] = int32(at), int32(len(buf))
		v.set = 1<<fLimit | 1<<fRemaining | 1<<fReset | 1<<fPolicy | 1<<fRateLimit
		v.fixed = 1<<fLimit | 1<<fPolicy
		return v, buf
	}
	return planAll(d, buf, earlier)
}

// usual reports whether d is the usual decision: a request counted and
// allowed against the limiter's own budget, without quotas, by a limiter
// that writes both families of fields. Over no earlier limiter's fields,
// its response carries the policy's constant X-RateLimit-Limit and
// RateLimit-Policy, and the RateLimit item of appendUsualItem, whose
// figures X-RateLimit-Remaining and -Reset report. The writers take that
// path first: planAll is large, and its code, run for every request, had
// crowded the rest of a request's code out of the instruction cache.
func (d *Decision) usual() bool {
	p := d.policy
	return p != nil && !p.shadow && p.legacy && p.draft && d.quotas == nil && d.Allowed && d.Remaining >= 0 &&
		int64(d.Limit) == p.limit && d.Window == p.window
}

// appendUsualItem appends the RateLimit item of a usual decision (see
// usual), "name";r=remaining;t=reset, and returns where its figures
// are: remaining in [r, rEnd), reset from t to the item's end.
func (d *Decision) appendUsualItem(b []byte) (_ []byte, r, rEnd, t int) {
	b = append(append(b, d.policy.name...), ";r="...)
	r = len(b)
	b = appendCount(b, int64(d.Remaining))
	rEnd = len(b)
	b = append(b, ";t="...)
	t = len(b)
	return appendCount(b, window.CeilDiv(d.Reset, time.Second)), r, rEnd, t
}

// planAll is planFields for any decision.
func planAll[T string | []byte](d *Decision, buf []byte, earlier func(i int) T) (fieldValues, []byte) {
	var v fieldValues
	p := d.policy
	remaining, reset := d.figures()
	var earlierRetry int64              // an earlier limiter's Retry-After, when it wins
	span := func(i uint, at, end int) { // field i's value is buf[at:end]
		v.at[i], v.end[i], v.set = int32(at), int32(end), v.set|1<<i
	}
	add := func(i uint, b []byte) { // field i's value is what b appended to buf
		span(i, len(buf), len(b))
		buf = b
	}
	fixed := func(i uint) { v.set, v.fixed = v.set|1<<i, v.fixed|1<<i }
	// The policy's own budget was formatted once; a tenant's own plan, or
	// the fallback's budget for it, is formatted for the request.
	own := int64(d.Limit) == p.limit && d.Window == p.window
	limit := func() {
		if own {
			fixed(fLimit)
			return
		}
		add(fLimit, appendCount(buf, int64(d.Limit)))
	}
	figures := false // X-RateLimit-Remaining and -Reset report d's figures
	if p.legacy {
		prevLimit := earlier(fLimit)
		switch prev, ok := headerfield.Count(earlier(fRemaining)); {
		case remaining < 0:
			if len(prevLimit) == 0 {
				limit()
			}
		case len(prevLimit) != 0 && p.inFlight != headerfield.InFlight(prevLimit, earlier(fPolicy)):
			// A rate's fields and a limit in flight's: slots are no measure
			// of requests per window, so the fields report the rate, the
			// limit in flight only when it refused the request.
			if !p.inFlight || !d.Allowed {
				limit()
				figures = true
			}
		case ok && earlierWins(prev, earlier(fReset), remaining, reset):
			earlierRetry, _ = headerfield.Count(earlier(fReset))
		default:
			limit()
			figures = true
		}
	}
	if p.draft && d.quotas != nil {
		add(fPolicy, d.appendPolicyItems(appendList(buf, earlier(fPolicy))))
		if remaining >= 0 {
			add(fRateLimit, d.appendRateLimitItems(appendList(buf, earlier(fRateLimit))))
		}
	} else if p.draft {
		switch prev := earlier(fPolicy); {
		case len(prev) == 0 && own:
			fixed(fPolicy)
		case own:
			add(fPolicy, append(appendList(buf, prev), p.policyItem...))
		default:
			add(fPolicy, appendPolicyItem(appendList(buf, prev), p.name, int64(d.Limit), p.itemWindow(d.Window)))
		}
		if remaining >= 0 {
			// appendRateLimitItem's item, whose figures X-RateLimit-Remaining
			// and -Reset then share: formatted once, and stored once.
			b := append(append(appendList(buf, earlier(fRateLimit)), p.name...), ";r="...)
			r := len(b)
			b = appendCount(b, remaining)
			r1 := len(b)
			b = append(b, ";t="...)
			t := len(b)
			b = appendCount(b, reset)
			if figures {
				span(fRemaining, r, r1)
				span(fReset, t, len(b))
				figures = false
			}
			add(fRateLimit, b)
		}
	}
	if figures {
		add(fRemaining, appendCount(buf, remaining))
		add(fReset, appendCount(buf, reset))
	}
	if d.retryAfter() {
		add(fRetryAfter, appendCount(buf, max(window.CeilDiv(d.RetryAfter, time.Second), earlierRetry)))
	}
	return v, buf
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
	if !d.usual() || len(h.PeekCanonical(fieldNameBytes[fRemaining])) != 0 ||
		len(h.PeekCanonical(fieldNameBytes[fPolicy])) != 0 || len(h.PeekCanonical(fieldNameBytes[fRateLimit])) != 0 {
		d.setAnyFastHTTPHeaders(h)
		return
	}
	// planFields's usual path, written out: the fields in planFields' order.
	var buf [128]byte
	item, r, rEnd, t := d.appendUsualItem(buf[:0])
	h.SetCanonical(fieldNameBytes[fLimit], d.policy.limitBytes)
	h.SetCanonical(fieldNameBytes[fRemaining], item[r:rEnd])
	h.SetCanonical(fieldNameBytes[fReset], item[t:])
	h.SetCanonical(fieldNameBytes[fPolicy], d.policy.policyItemBytes)
	h.SetCanonical(fieldNameBytes[fRateLimit], item)
}

// setAnyFastHTTPHeaders is SetFastHTTPHeaders for any decision.
func (d *Decision) setAnyFastHTTPHeaders(h *fasthttp.ResponseHeader) {
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
	if d.policy == nil || d.policy.shadow {
		return // as planFields: nothing to write
	}
	// planAll, not plan: SetFastHTTPHeaders has found that plan's short
	// path does not apply, and plan would read the earlier fields again.
	v, buf := planAll(d, buf, func(i int) []byte { return h.PeekCanonical(fieldNameBytes[i]) })
	for set := v.set; set != 0; set &= set - 1 {
		i := uint(bits.TrailingZeros8(set))
		b, _, ok := v.constant(i, d.policy)
		if !ok {
			b = buf[v.at[i]:v.end[i]]
		}
		h.SetCanonical(fieldNameBytes[i], b)
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
// Retry-After keep reporting the more restrictive of the two; of a rate
// and an InFlight limit, the rate, unless the InFlight limit refused the
// request.
func (d *Decision) SetHeaders(h http.Header) {
	var buf [256]byte
	v, b := planFields(d, buf[:0], func(i int) string { return first(h[fieldNames[i]]) })
	if v.set == 0 {
		return
	}
	formatted, values := httpBacking(b, bits.OnesCount8(v.set))
	for i := range uint(numFields) {
		if !v.has(i) {
			continue
		}
		_, s, ok := v.constant(i, d.policy)
		if !ok {
			s = formatted[v.at[i]:v.end[i]]
		}
		values[0] = s
		h[fieldNames[i]] = values[:1:1]
		values = values[1:]
	}
}

// httpValues backs the fields of one response in one allocation: their
// values, and the bytes formatted for them. An allowed request's fields
// fit for a policy name of up to 20 bytes and figures of up to 13 digits
// (the RateLimit item, whose figures X-RateLimit-* share). Each response has its own,
// never written again once the header holds it.
type httpValues struct {
	values    [numFields - 1]string // all but Retry-After, which only a refusal has
	formatted [48]byte
}

// httpBacking returns b as a string and room for n field values: in one
// httpValues when they fit, else in two allocations.
func httpBacking(b []byte, n int) (string, []string) {
	if n > len(httpValues{}.values) || len(b) > len(httpValues{}.formatted) {
		return string(b), make([]string, n)
	}
	x := new(httpValues)
	copy(x.formatted[:], b)
	return unsafe.String(&x.formatted[0], len(b)), x.values[:]
}

// earlierWins reports whether the figures an earlier limiter reported,
// prevRemaining and the field prevReset, are more restrictive than
// remaining and reset: fewer requests left, or as few and a reset no
// sooner.
func earlierWins[T string | []byte](prevRemaining int64, prevReset T, remaining, reset int64) bool {
	if prevRemaining != remaining {
		return prevRemaining < remaining
	}
	r, _ := headerfield.Count(prevReset)
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
	b = appendRateLimitItem(b, d.policy.name, m.remaining, window.CeilDiv(m.reset, time.Second))
	for i, quoted := range d.quotas.quoted {
		f := &d.lims[i+1]
		b = appendRateLimitItem(append(b, ", "...), quoted, f.remaining, window.CeilDiv(f.reset, time.Second))
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

// appendCount appends n, a count or a number of seconds (never negative),
// in decimal, as headerfield.Count reads it: strconv.AppendInt's result,
// at about half its cost, which formatting three figures a response makes
// felt. The digits go straight into b's room, which the writers' buffers
// have.
func appendCount(b []byte, n int64) []byte {
	const pairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
		"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
		"8081828384858687888990919293949596979899"
	u := uint64(n)
	// The number of digits: log10 from the bit length, then one compare.
	w := bits.Len64(u|1)*1233>>12 + 1
	if w > 1 && u < pow10[w-1] {
		w--
	}
	at := len(b)
	if cap(b)-at < w {
		b = append(b, make([]byte, w)...)
	} else {
		b = b[:at+w]
	}
	d := b[at:]
	i := len(d)
	for u >= 100 {
		q := u / 100
		r := (u - q*100) * 2
		i -= 2
		d[i], d[i+1] = pairs[r], pairs[r+1]
		u = q
	}
	if u >= 10 {
		d[0], d[1] = pairs[u*2], pairs[u*2+1]
	} else {
		d[0] = byte('0' + u)
	}
	return b
}

// pow10[i] is 10^i.
var pow10 = [...]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
	1e16, 1e17, 1e18, 1e19}

// policyItems returns the items of RateLimit-Policy of s's quotas, each
// after ", ", for the figures lims (of a Decision: the main limit's
// first). They change only with the length of a calendar month, so the
// last ones made are kept.
func (s *quotaSet) policyItems(lims *[maxQuotas + 1]figure) []byte {
	if c := s.items.Load(); c != nil && c.lims == windowsOf(lims, len(s.quotas)) {
		return c.items
	}
	var b []byte
	for i, quoted := range s.quoted {
		f := &lims[i+1]
		b = appendPolicyItem(append(b, ", "...), quoted, f.limit, f.window)
	}
	s.items.Store(&policyItems{lims: windowsOf(lims, len(s.quotas)), items: b})
	return b
}

// windowsOf is the quotas' limits and windows in lims.
func windowsOf(lims *[maxQuotas + 1]figure, n int) (w [maxQuotas][2]int64) {
	for i := range n {
		w[i] = [2]int64{lims[i+1].limit, int64(lims[i+1].window)}
	}
	return w
}
