package envoyrls

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/gatewaykit/ratelimit"
	"google.golang.org/protobuf/types/known/durationpb"
)

// A call is one ShouldRateLimit request being decided: each descriptor's
// rule and tenant, what it costs, and how it was decided.
type call struct {
	s   *Server
	req *rlsv3.RateLimitRequest
	ds  []descriptor
}

// What a descriptor asks of its rule.
const (
	none  = iota // no rule, a replaced one, or one that allows everything
	take         // a cost: hits_addend, or the request's, or 1
	read         // hits_addend 0: the figures, spending nothing
	give         // is_negative_hits: hits_addend given back
	block        // a rule with a limit of 0, which refuses any cost
)

// descriptor is one descriptor of a call: what it asks, of which rule
// and tenant, and its answer's figures.
type descriptor struct {
	op     int
	r      *rule
	tenant string
	cost   uint64
	spends bool // a blocked descriptor's cost is above 0, and not given back

	d ratelimit.Decision // a take's

	// The answer: the code, and the figures of the limit that decided
	// (figures false when nothing counted the descriptor).
	over      bool
	figures   bool
	lim       limit
	remaining uint64
	window    time.Duration
	reset     time.Duration
}

// newCall matches req's descriptors to the rules loaded now, and leaves
// out those that another rule of the request replaces.
func newCall(s *Server, req *rlsv3.RateLimitRequest) *call {
	rs := s.rules.Load()
	c := &call{s: s, req: req, ds: make([]descriptor, len(req.Descriptors))}
	var replaced map[string]bool
	for i, pd := range req.Descriptors {
		d := &c.ds[i]
		d.r, d.tenant = rs.match(req.Domain, pd.GetEntries())
		if d.r == nil {
			continue
		}
		if pd.GetLimit() != nil {
			s.logLimited(slog.LevelWarn, "envoyrls: a descriptor's limit override is not applied; the configured rule decides",
				slog.String("rule", d.r.path), slog.String("override", pd.GetLimit().String()))
		}
		for _, name := range d.r.replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[name] = true
		}
		d.cost = uint64(max(req.HitsAddend, 1))
		if h := pd.GetHitsAddend(); h != nil {
			d.cost = h.GetValue()
		}
		switch {
		case d.r.unlimited:
			d.op = none
		case blocks(d.r):
			d.op = block
			d.spends = d.cost > 0 && !pd.GetIsNegativeHits()
		case pd.GetIsNegativeHits():
			d.op = give
		case d.cost == 0:
			d.op = read
		default:
			d.op = take
		}
	}
	for i := range c.ds {
		if d := &c.ds[i]; d.r != nil && d.r.limitName != "" && replaced[d.r.limitName] {
			d.r, d.op = nil, none
		}
	}
	return c
}

// decide decides every descriptor, at once when there are several (so
// that a store that batches sends them in one round trip), and when one
// is over its limit gives back what the others took.
func (c *call) decide(ctx context.Context) {
	c.each(func(d *descriptor) { c.decideOne(ctx, d) })
	if !c.over() {
		return
	}
	// A refused request spends nothing: the give-back runs whatever
	// becomes of the caller, each within StoreTimeout.
	bg := context.WithoutCancel(ctx)
	c.each(func(d *descriptor) {
		if d.op == take && d.d.Allowed && !d.d.Shadowed {
			if d.r.entry.lim.Release(bg, d.d) == nil && d.figures {
				d.remaining = min(d.remaining+d.cost, uint64(d.lim.perUnit))
			}
		}
	})
}

// each calls f for every descriptor that asks something, in goroutines
// of their own but the first.
func (c *call) each(f func(*descriptor)) {
	var wg sync.WaitGroup
	var first *descriptor
	for i := range c.ds {
		d := &c.ds[i]
		if d.op == none {
			continue
		}
		if first == nil {
			first = d
			continue
		}
		wg.Go(func() { f(d) })
	}
	if first != nil {
		f(first)
	}
	wg.Wait()
}

// over reports whether a descriptor is over its limit.
func (c *call) over() bool {
	for i := range c.ds {
		if c.ds[i].over {
			return true
		}
	}
	return false
}

// decideOne decides d as its op says.
func (c *call) decideOne(ctx context.Context, d *descriptor) {
	switch d.op {
	case block:
		for _, l := range d.r.limits {
			if l.perUnit == 0 {
				d.lim, d.figures = l, true
			}
		}
		d.over = d.spends && !d.r.shadow
	case take:
		d.d = d.r.entry.lim.TakeN(ctx, d.tenant, int(min(d.cost, math.MaxInt32)))
		d.over = !d.d.Allowed
		remaining := d.d.Remaining
		if d.d.Shadowed {
			remaining = 0 // over its limit, let through: nothing left, as the reference says
		}
		c.figuresOf(d, d.d.Policy, remaining, d.d.Window, d.d.Reset, d.d.By != ratelimit.ByNone)
	case read:
		c.readOne(ctx, d)
	case give:
		// A failure is the Limiter's to log; the answer is OK either way.
		_ = d.r.entry.lim.GiveBack(ctx, d.tenant, int(min(d.cost, math.MaxInt32)))
		d.lim = d.r.limits[0]
	}
}

// readOne reads d's figures, spending nothing: the limit with the fewest
// units left. It is over its limit when nothing is left.
func (c *call) readOne(ctx context.Context, d *descriptor) {
	us, err := d.r.entry.lim.Usage(ctx, d.tenant)
	if err != nil {
		c.s.failure("envoyrls: reading a descriptor's usage failed", d, err)
		d.over = c.s.opts.FailClosed
		d.lim = d.r.limits[0]
		return
	}
	best := -1
	for i, u := range us {
		if u.Limit == everything {
			continue
		}
		if best < 0 || u.Remaining < us[best].Remaining || u.Remaining == us[best].Remaining && u.Reset > us[best].Reset {
			best = i
		}
	}
	u := us[best]
	d.over = u.Remaining == 0 && !d.r.shadow
	c.figuresOf(d, u.Name, u.Remaining, u.Window, u.Reset, true)
}

// figuresOf sets d's limit to the one that policy names, with its
// figures when known.
func (c *call) figuresOf(d *descriptor, policy string, remaining int, window, reset time.Duration, known bool) {
	l, ok := limitOf(d.r, policy)
	if !ok {
		l = d.r.limits[0]
	}
	d.lim = l
	if !known || remaining < 0 {
		return
	}
	d.figures, d.remaining, d.window, d.reset = true, uint64(remaining), window, reset
}

// response is the call's answer: the overall code, a status for each
// descriptor in the request's order, and the header fields when asked.
func (c *call) response() *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(c.ds)),
	}
	for i := range c.ds {
		resp.Statuses[i] = c.ds[i].status()
		if c.ds[i].over {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if c.s.opts.Headers {
		resp.ResponseHeadersToAdd = c.headers()
	}
	return resp
}

// status is d's status: OK or OVER_LIMIT; for a descriptor that a limit
// decided, that limit, with what is left of it and when it resets; for
// one whose rule allows everything, OK with all a uint32 holds left, as
// the reference answers.
func (d *descriptor) status() *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if d.over {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	switch {
	case d.r == nil:
		return st
	case d.r.unlimited:
		st.LimitRemaining = math.MaxUint32
		return st
	}
	st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
		Name:            d.r.limitName,
		RequestsPerUnit: d.lim.perUnit,
		Unit:            d.lim.unit,
	}
	if d.figures {
		st.LimitRemaining = uint32(min(d.remaining, math.MaxUint32))
		if d.reset > 0 {
			st.DurationUntilReset = durationpb.New(d.reset)
		}
	}
	return st
}
