package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync/atomic"
	"time"
)

// Giving back: a request's cost is spent when it is decided, but what a
// gateway charges is often known only when the response is written
// (Config.SkipFailedRequests), a later limiter on the same request may
// refuse it, and a request in flight holds its slots until it ends.
// Release gives back what one Decision took.
//
// A count is given back only in the window it was counted in. The
// Decision names each limit's window (take.marks): a MemoryCounter by the
// window's end (a fixed window), its start (a sliding one) or its
// period's start (a calendar quota), exactly. Redis windows live on the
// server's clock, which a replica cannot read: there a mark is when, on
// the process's own monotonic clock, the window was to end (or started),
// from what the script answered, and the release tells the script where
// the window should be now (its offset: the milliseconds a fixed window
// or a period has left, or a sliding window has run). The script gives
// back in a window whose offset is within half its length of that: the
// next window of a key is a whole length away, and the error, the round
// trips' latency, is far less.

// Release gives back what d took, in every limit it was counted in, when
// those windows are still the ones it was counted in (a window that has
// ended is left alone), or, for an InFlight limiter, the slots d holds.
// It is a no-op, returning nil, for a decision that took nothing: refused,
// shadowed, decided by the over-limit cache or by nothing. A fixed
// window on Redis whose count falls to 0 is deleted, so that the tenant's
// next request starts a window, as if none had come; a MemoryCounter's
// window runs on.
//
// Give back each decision once: a second Release of the same Decision
// gives its cost back again (the slots of an InFlight decision are the
// exception: they are gone after the first). d must be this limiter's.
// ctx bounds the wait, within Options.StoreTimeout; a request's
// middleware gives back with the request's values but not its
// cancellation. A store failure is logged as any other and returned, and
// the count stands: a window's until it ends, a slot until its lease
// does. Release needs Counter and Fallback to be a MemoryCounter or a
// RedisCounter (see CheckRelease).
func (l *Limiter) Release(ctx context.Context, d Decision) error {
	if !d.took {
		return nil
	}
	counter := l.opts.Counter
	switch d.policy {
	case &l.policy:
	case &l.fallbackPolicy:
		counter = l.opts.Fallback
	default:
		return errors.New("ratelimit: Release: the Decision is another limiter's")
	}
	if !decides(counter) {
		return fmt.Errorf("ratelimit: Release needs a MemoryCounter or a RedisCounter; %T counts by Incr alone", counter)
	}
	var buf [maxKeyLen]byte
	kb := appendKey(buf[:0], l.keyPrefix, d.tenant, l.opts.Algorithm)
	if d.byAddr {
		kb = appendAddrKey(buf[:0], l.keyPrefix, d.addr, l.opts.IPv6Prefix, l.opts.Algorithm)
	}
	t := take{cost: d.cost, limit: int64(d.Limit), window: d.Window, algo: l.opts.Algorithm,
		quotas: d.quotas, give: true, slot: d.slot, marks: d.marks}
	if d.quotas != nil {
		t.limit, t.window = d.lims[0].limit, d.lims[0].window
	}
	var err error
	switch c := counter.(type) {
	case *MemoryCounter:
		err = c.release(kb, &t)
	default:
		t.key = counterKey(kb, t.quotas)
		if d.By == ByFallback {
			deadline, _ := ctx.Deadline()
			_, err = c.(boundedTaker).takeWithin(ctx, t, deadline, 0)
		} else {
			now := l.clock.Now()
			err = l.ask(ctx, &t, now)
		}
	}
	if err == nil {
		if l.refusals != nil {
			// A refusal this replica cached for the tenant may no longer
			// hold.
			l.refusals.forget(kb)
		}
		return nil
	}
	if errors.Is(err, ErrContextDone) || ctx.Err() != nil {
		return err // the caller's own doing: nothing to say of the counter
	}
	if err != errBreakerOpen {
		l.failures.record(slog.LevelError, "ratelimit: counter failed to give back a request's count; it stands until its window or lease ends",
			slog.String("tenant", logTenant(d.tenant)), slog.String("key", string(kb)), slog.Any("err", err))
	}
	return err
}

// Algorithm returns the limiter's Options.Algorithm: a middleware gives
// back an InFlight limiter's slots when its handler returns.
func (l *Limiter) Algorithm() Algorithm { return l.opts.Algorithm }

// CheckRelease returns nil when the limiter can give back what a request
// took (Release), and otherwise an error that names the counter that
// cannot: a Counter of your own only counts up, by Incr. A middleware
// with SkipFailedRequests or SkipSuccessfulRequests calls it at setup and
// panics with the error.
func (l *Limiter) CheckRelease() error {
	for _, c := range []struct {
		field string
		c     Counter
	}{{"Counter", l.opts.Counter}, {"Fallback", l.opts.Fallback}} {
		if c.c != nil && !decides(c.c) {
			return fmt.Errorf("ratelimit: giving back needs %s to be a MemoryCounter or a RedisCounter; %T only counts up", c.field, c.c)
		}
	}
	return nil
}

// CheckSkip returns nil when a middleware can give back requests by a
// skip rule (SkipFailedRequests, SkipSuccessfulRequests), and otherwise
// why not: the counter cannot give back (CheckRelease), or the limiter is
// InFlight, whose slots every request gives back when its handler
// returns. A middleware with a skip rule calls it at setup and panics
// with the error, naming the rule.
func (l *Limiter) CheckSkip() error {
	if l.opts.Algorithm == InFlight {
		return errors.New("an InFlight limiter gives back every request's slots when its handler returns; " +
			"a skip rule has nothing left to give back")
	}
	return l.CheckRelease()
}

// release gives back t (see Release) in m, under key, held in a byte
// slice: without allocating.
func (m *MemoryCounter) release(key []byte, t *take) error {
	if m.closed.Load() {
		return ErrClosed
	}
	h := maphash.Bytes(memSeed, key)
	tbl := m.shards[memShardOf(h)&^m.shardsOff].table.Load()
	if tbl == nil {
		return nil
	}
	_, w := tbl.find(h, key)
	if w == nil {
		return nil
	}
	switch {
	case t.algo == InFlight:
		if f := w.flight(); f != nil {
			t.given = f.releaseSlot(t.slot)
		}
	case t.quotas != nil:
		if g := w.group(); g != nil {
			t.given = g.release(t, m.clock)
		}
	case w.group() != nil || w.flight() != nil:
	case t.algo == SlidingWindow && w.width == int64(t.window) && w.start == t.marks[0],
		t.algo == FixedWindow && w.width == 0 && w.end == t.marks[0]:
		t.given = giveBack(&w.count, t.cost)
	}
	return nil
}

// giveBack takes up to cost off count, never below 0, and returns how
// much it took.
func giveBack(count *atomic.Int64, cost int64) int64 {
	for {
		c := count.Load()
		n := min(c, cost)
		if n <= 0 || count.CompareAndSwap(c, c-n) {
			return max(n, 0)
		}
	}
}

// release gives back t's cost in each of g's windows that is still the
// one t was counted in, and returns what the main limit got back.
func (g *memGroup) release(t *take, clk clock) int64 {
	ls, n := t.limits()
	wall := clk.Now()
	now := int64(clk.since(wall))
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.set != t.quotas {
		g.match(&ls, n)
		g.set = t.quotas
	}
	var given int64
	for j := range n {
		s := &g.subs[j]
		s.roll(&ls[j], now, wall)
		if s.count == 0 || s.mark(&ls[j]) != t.marks[j] {
			continue
		}
		back := min(s.count, t.cost)
		s.count -= back
		if j == 0 {
			given = back
		}
	}
	return given
}

// offsets are where t's windows should be now, as the Redis script
// measures them (see the comment at the top): for each limit, the
// milliseconds a fixed window or a period has left, or a sliding window
// has run, from the marks a RedisCounter took them at.
func (t *take) offsets(now int64) (off [maxQuotas + 1]int64) {
	ls, n := t.limits()
	for j := range n {
		d := t.marks[j] - now
		if ls[j].sliding {
			d = -d
		}
		off[j] = d / int64(time.Millisecond)
	}
	return off
}

// markRedis fills in t.marks from t's answer, on the process's monotonic
// clock at now: each window's end, or a sliding window's start, as the
// script reported it.
func (t *take) markRedis(now int64) {
	if t.algo == InFlight {
		return
	}
	if t.quotas == nil {
		if t.algo == SlidingWindow {
			t.marks[0] = now - int64(t.slide.elapsed)
		} else {
			t.marks[0] = now + int64(t.reset)
		}
		return
	}
	ls, n := t.limits()
	for j := range n {
		switch {
		case j == 0 && ls[j].sliding:
			t.marks[j] = now - int64(t.slide.elapsed)
		case j == 0:
			t.marks[j] = now + int64(t.reset)
		case ls[j].sliding:
			t.marks[j] = now - int64(t.q[j-1].slide.elapsed)
		default:
			t.marks[j] = now + int64(t.q[j-1].reset)
		}
	}
}
