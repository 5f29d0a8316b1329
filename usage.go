package ratelimit

import (
	"context"
	"fmt"
	"hash/maphash"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The operator's view of a tenant: what it has used of every limit, and a
// way to give it its whole budget back.

// Usage is what a tenant has used of one of its limits, as Limiter.Usage
// reports it.
type Usage struct {
	// Name is the limit's name, as the RateLimit header fields give it:
	// the limiter's policy name (Options.Name, or "default") for the main
	// limit, a quota's Name for a quota.
	Name string

	// Limit is the tenant's limit, by its plan.
	Limit int

	// Window is the limit's window, or for a calendar quota the length of
	// the period now running.
	Window time.Duration

	// Used is what the tenant has spent in the window or period: in a
	// sliding window, the weighted count that requests are decided
	// against, rounded up.
	Used int

	// Remaining is what a request may still spend now: Limit - Used, and
	// 0 once spent.
	Remaining int

	// Reset is how long until more than Remaining is available: the time
	// a fixed window has left (0 when none runs), until a calendar period
	// ends, or until a sliding window's count has fallen by one.
	Reset time.Duration
}

// Usage returns what tenant has used of each of its limits (by its plan),
// the main one first, then its quotas in order, spending nothing: one
// script call on Redis. A request without a tenant is tenant "". It needs
// a MemoryCounter or a RedisCounter, and waits for Redis as ctx lets it.
func (l *Limiter) Usage(ctx context.Context, tenant string) ([]Usage, error) {
	t, err := l.tenantLimits(tenant)
	if err != nil {
		return nil, err
	}
	var buf [maxKeyLen]byte
	kb := appendKey(buf[:0], l.keyPrefix, tenant, l.opts.Algorithm)
	var st [maxQuotas + 1]limitState
	switch c := l.opts.Counter.(type) {
	case *MemoryCounter:
		st, err = c.usage(kb, &t)
	case *RedisCounter:
		st, err = c.usage(ctx, string(kb), &t)
	default:
		err = fmt.Errorf("ratelimit: Usage needs Counter to be a MemoryCounter or a RedisCounter, not %T", c)
	}
	if err != nil {
		return nil, fmt.Errorf("ratelimit: usage of tenant %s: %w", logTenant(tenant), err)
	}
	ls, n := t.limits()
	us := make([]Usage, n)
	for j := range n {
		us[j] = ls[j].usage(&st[j])
		us[j].Name = l.policy.policy
		if j > 0 {
			us[j].Name = ls[j].name
		}
	}
	return us, nil
}

// Reset clears tenant's counts in every limit of this limiter (by its
// plan: its quotas too), so that its next request has the whole budget: for
// support, or a new billing cycle. It deletes the tenant's keys by name,
// scanning nothing, on a cluster too, and clears the tenant from
// Options.Fallback when that is a MemoryCounter. This replica's over-limit
// cache forgets the tenant at once; another replica's refuses it for at
// most 10 seconds more, the longest an entry of the cache lasts. Requests
// in flight meanwhile may still count in the old windows.
func (l *Limiter) Reset(ctx context.Context, tenant string) error {
	t, err := l.tenantLimits(tenant)
	if err != nil {
		return err
	}
	var buf [maxKeyLen]byte
	kb := appendKey(buf[:0], l.keyPrefix, tenant, l.opts.Algorithm)
	switch c := l.opts.Counter.(type) {
	case *MemoryCounter:
		err = c.reset(kb)
	case *RedisCounter:
		err = c.reset(ctx, string(kb), &t)
	default:
		err = fmt.Errorf("ratelimit: Reset needs Counter to be a MemoryCounter or a RedisCounter, not %T", c)
	}
	if l.refusals != nil {
		l.refusals.forget(kb)
	}
	if l.fallback != nil {
		if ferr := l.fallback.reset(kb); err == nil {
			err = ferr
		}
	}
	if err != nil {
		return fmt.Errorf("ratelimit: reset of tenant %s: %w", logTenant(tenant), err)
	}
	return nil
}

// tenantLimits returns a take of tenant's limits, by its plan.
func (l *Limiter) tenantLimits(tenant string) (take, error) {
	t := take{cost: 1, limit: int64(l.opts.Limit), window: l.opts.Window, algo: l.opts.Algorithm, quotas: l.quotas}
	if l.opts.PlanFor != nil {
		if err := l.plan(tenant, &t); err != nil {
			return t, err
		}
	}
	return t, nil
}

// usage is the Usage of limit l whose key is s.
func (l *groupLimit) usage(s *limitState) Usage {
	u := Usage{Limit: int(l.limit), Window: l.window, Used: int(s.count)}
	switch {
	case l.sliding:
		s.slide.cur = s.count
		left := s.slide.remaining(l.limit)
		u.Used, u.Remaining = int(ceilDuration(s.slide.estimate())), int(left)
		if u.Used > 0 {
			u.Reset = s.slide.until(float64(l.limit - left - 1))
		}
		return u
	case l.cal != 0:
		u.Window, u.Reset = s.period, s.left
	case s.count > 0:
		u.Reset = s.left
	}
	u.Remaining = int(max(l.limit-s.count, 0))
	return u
}

// usage returns the keys of t's limits for key, changing nothing.
func (m *MemoryCounter) usage(key []byte, t *take) (st [maxQuotas + 1]limitState, err error) {
	if m.closed.Load() {
		return st, ErrClosed
	}
	ls, n := t.limits()
	var subs [maxQuotas + 1]memSub
	for j := range n {
		subs[j] = memSub{name: ls[j].name, cal: ls[j].cal}
	}
	wall := m.clock.Now()
	now := int64(m.clock.since(wall))
	h := maphash.Bytes(memSeed, key)
	if tbl := m.shards[memShardOf(h)&^m.shardsOff].table.Load(); tbl != nil {
		if _, w := tbl.find(h, key); w != nil {
			if g := w.group(); g != nil {
				g.mu.Lock()
				for j := range n {
					for k := range g.n {
						if g.subs[k].name == ls[j].name && g.subs[k].cal == ls[j].cal {
							subs[j] = g.subs[k]
						}
					}
				}
				g.mu.Unlock()
			} else if f := w.flight(); f != nil {
				subs[0].count = f.live(now)
			} else {
				subs[0] = w.asSub(now)
			}
		}
	}
	for j := range n {
		subs[j].roll(&ls[j], now, wall)
		subs[j].state(&st[j], &ls[j], now, wall)
	}
	return st, nil
}

// reset ends key's window, or its tenant's windows, at once.
func (m *MemoryCounter) reset(key []byte) error {
	if m.closed.Load() {
		return ErrClosed
	}
	now := int64(m.clock.elapsed())
	h := maphash.Bytes(memSeed, key)
	s := &m.shards[memShardOf(h)&^m.shardsOff]
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.table.Load(); t != nil {
		if i, w := t.find(h, key); w != nil {
			// An ended window: the key's next request starts afresh, and
			// the shard's next rebuild drops it.
			t.slots[i].w.Store(&memWindow{key: w.key, hash: h, start: now, end: now})
		}
	}
	return nil
}

// usage returns the keys of t's limits for key, read in one script call.
func (r *RedisCounter) usage(ctx context.Context, key string, t *take) (st [maxQuotas + 1]limitState, err error) {
	if t.quotas != nil {
		key = quotaHash(key)
	}
	vals, err := r.eval(ctx, key, limitArgs("U", t))
	ls, n := t.limits()
	if err == nil && len(vals) != 3*n {
		err = fmt.Errorf("the script returned %d values for %d limits", len(vals), n)
	}
	if err != nil {
		return st, err
	}
	for j := range n {
		a, b, count := vals[3*j], vals[3*j+1], vals[3*j+2]
		s := &st[j]
		s.count = count
		switch {
		case ls[j].sliding:
			s.slide = sliding{prev: b, cur: count, elapsed: msDuration(a), window: scriptWindow(&ls[j])}
		case ls[j].cal != 0:
			s.left, s.period = msDuration(a), msDuration(b)
		case a > 0:
			s.left = msDuration(a)
		case a == -1: // a count without an expiry, which the next request mends
			s.left = ls[j].window
		}
	}
	return st, nil
}

// reset deletes the keys of t's limits for key, in one script call.
func (r *RedisCounter) reset(ctx context.Context, key string, t *take) error {
	if t.quotas != nil {
		key = quotaHash(key)
	}
	_, err := r.eval(ctx, key, limitArgs("R", t))
	return err
}

// limitArgs is the arguments of takeScript for a key of t's limits, of
// kind U (usage) or R (reset), or without quotas u or r: see takeScript.
func limitArgs(kind string, t *take) []any {
	algo := algoKind(t.algo)
	ms := ceilDiv(t.window, time.Millisecond)
	switch {
	case t.algo == InFlight:
		return []any{strings.ToLower(kind), "i", ms}
	case t.quotas == nil:
		return []any{strings.ToLower(kind), kindOne[algo], ms}
	}
	args := append([]any{"Q", "1"}, t.quotas.setArgs[algo]...)
	return append(args, kind, "1", strconv.FormatInt(t.limit, 16), ms)
}

// eval runs takeScript on key with args, outside any batch, as an
// operator's call: by its digest, or with its body when the server does
// not have it yet. A server that cannot be reached fails it at once, with
// the dial's error, as it fails a request's round trip.
func (r *RedisCounter) eval(ctx context.Context, key string, args []any) ([]int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cut := &roundTrip{cancel: cancel}
	dials := r.nodes.of(key).dials
	dials.add(cut)
	defer dials.remove(cut)

	rdb := r.nodes.rdb
	cmd := rdb.EvalSha(ctx, takeScriptSHA, []string{key}, args...)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		cmd = rdb.Eval(ctx, takeScript, []string{key}, args...)
	}
	vals, err := cmd.Int64Slice()
	if c := cut.cause(); err != nil && c != nil {
		err = c
	}
	if err != nil {
		return nil, asMisconfigured(err, r.nodes.cluster != nil)
	}
	return vals, nil
}
