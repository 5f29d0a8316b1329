package ratelimit

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gatewaykit/ratelimit/internal/lease"
	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// leaseStore is the Store of a limiter with Options.Leases, in front of
// the store it was given: a tenant hot on this replica is decided from a
// block of its budget, claimed from that store in one Take of the
// block's size and counted there in every limit of the request, so that
// the replicas together never admit more than the store would; the
// blocks are internal/lease's. Everything else passes through: cold
// tenants, reads (Usage), waiting requests, InFlight, Ping.
type leaseStore struct {
	Store
	table   *lease.Table[Request] // a hot key's entry keeps its last claim's Request, to give back with
	metrics *Metrics
	now     func() time.Time // the limiter's clock, for give-backs of idle blocks
	timeout time.Duration    // a give-back's wait for the store

	// slack: a store that counts in whole milliseconds (not Local) may
	// end a window up to one later than the time it said was left, so a
	// block stops being spent that much before.
	slack time.Duration

	// state: what the store's answers said of it so far (see Take).
	state atomic.Int32
}

// What a lease store knows of the store behind it: nothing yet, that it
// decides (its answers do not come by transactions), or that it counts
// by transactions, where a refused claim would stay counted, whole.
const (
	storeUnknown int32 = iota
	storeDecides
	storeTransacts
)

func newLeaseStore(s Store, m *Metrics, now func() time.Time, timeout time.Duration) *leaseStore {
	t := lease.NewTable[Request]()
	t.Expired = func(n int64) { m.leased(leaseExpired, n) }
	return &leaseStore{Store: s, table: t, metrics: m, now: now, timeout: timeout}
}

// Attach attaches the limiter to the store behind.
func (s *leaseStore) Attach(r Request) (StoreInfo, error) {
	info, err := s.Store.Attach(r)
	if !info.Local {
		s.slack = time.Millisecond
	}
	return info, err
}

// leased reports whether r may be decided from a block: a request that
// takes, now, from a window or a bucket (leasable), of a store that
// decides.
func (s *leaseStore) leased(r *Request) bool {
	return leasable(r) && s.state.Load() == storeDecides
}

func leasable(r *Request) bool {
	return r.Cost > 0 && r.Delay == 0 && r.Algorithm != InFlight && !r.probe
}

// spend decides r, whose key is key, from its tenant's block when it
// holds r's cost, without the store: the Limiter asks this before its
// over-limit cache and its breaker, which a decision from a block has
// nothing to do with. holds says that the block holds part of r's cost:
// the store may then allow r, asked for the rest, where the over-limit
// cache would refuse it.
func (s *leaseStore) spend(key []byte, r *Request) (a Answer, spent, holds bool) {
	if !s.leased(r) {
		return a, false, false
	}
	e := s.table.Lookup(key)
	if e == nil {
		return a, false, false
	}
	c, err := r.call()
	if err != nil {
		return a, false, false
	}
	ls, n := c.Limits()
	st, spent, held := e.Spend(r.Now.UnixNano(), r.Cost, ls[:n])
	return answerOf(&st, n), spent, held > 0
}

// Take decides r: from its tenant's block when the tenant is hot here,
// claiming a new block when it runs out; by the store behind for a cold
// tenant, near the limit (where a block is too small to claim), or when a
// claim is refused. Nothing is claimed before the store has answered a
// request as a store that decides, not by a transaction: a claim that a
// transaction refused would stay counted, a whole block of it.
func (s *leaseStore) Take(ctx context.Context, r Request) (Answer, error) {
	if !leasable(&r) {
		return s.direct(ctx, &r, nil, 0)
	}
	var buf [maxKeyLen]byte
	now := r.Now.UnixNano()
	key := r.appendKey(buf[:0])
	var e *lease.Entry[Request]
	if s.state.Load() == storeDecides {
		e = s.table.Hot(key, r.Cost, now)
	}
	if e == nil {
		// Cold, or asked before the store's first answer: a block may
		// be claimed while it is on its way.
		a, err := s.direct(ctx, &r, nil, 0)
		return s.refused(ctx, key, nil, &r, a, err)
	}
	c, err := r.call()
	if err != nil {
		return Answer{}, err
	}
	ls, n := c.Limits()
	for first := true; ; first = false {
		st := e.Next(now, r.Cost, ls[:n], first)
		switch {
		case st.Spent:
			return answerOf(&st, n), nil
		case st.Wait != nil:
			select {
			case <-st.Wait:
				continue
			case <-ctx.Done(): // the request's doing: not the store's failure
				return Answer{}, fmt.Errorf("%w (%w)", ErrContextDone, ctx.Err())
			}
		case st.Claim > 0:
			if a, ok, err := s.claim(ctx, e, &r, st.Claim, ls[:n]); ok || err != nil {
				return a, err
			}
		}
		a, err := s.topUp(ctx, &r, e, n)
		return s.refused(ctx, key, e, &r, a, err)
	}
}

// refused decides r, which the store refused (a; err: it failed), from
// its tenant's block e (nil: the one key names, hot since) when units came
// into it while r was on its way, or by the store once more when units of
// an idle block were on their way back to it (see lease.Entry.Refused).
func (s *leaseStore) refused(ctx context.Context, key []byte, e *lease.Entry[Request], r *Request, a Answer, err error) (Answer, error) {
	if err != nil || a.Allowed || a.byTransaction { // (a transaction's refusal stays counted)
		return a, err
	}
	if e == nil {
		if e = s.table.Lookup(key); e == nil {
			return a, nil
		}
	}
	c, err := r.call()
	if err != nil {
		return a, nil
	}
	ls, n := c.Limits()
	st, again := e.Refused(r.Now.UnixNano(), r.Cost, ls[:n], ctx.Done())
	switch {
	case st.Spent:
		return answerOf(&st, n), nil
	case again:
		if b, err := s.direct(ctx, r, e, n); err == nil {
			return b, nil
		}
	}
	return a, nil
}

// topUp decides r by the store behind, asking it only what r's tenant's
// block lacks of r's cost when the block holds some of it (see
// lease.Entry.Hold).
func (s *leaseStore) topUp(ctx context.Context, r *Request, e *lease.Entry[Request], n int) (Answer, error) {
	held, marks := e.Hold(r.Now.UnixNano(), r.Cost)
	if held == 0 {
		return s.direct(ctx, r, e, n)
	}
	rest := *r
	rest.Cost -= held
	a, err := s.direct(ctx, &rest, e, n)
	if (err != nil || !a.Allowed) && !e.Give(r.Now.UnixNano(), held, &marks, n) {
		s.giveBack(*r, held, marks) // its block is gone: to the store
	}
	return a, err
}

// direct decides r by the store behind, and tells e (nil: none) what it
// said.
func (s *leaseStore) direct(ctx context.Context, r *Request, e *lease.Entry[Request], n int) (Answer, error) {
	a, err := s.Store.Take(ctx, *r)
	if err != nil {
		return a, err
	}
	if a.byTransaction {
		s.state.Store(storeTransacts)
	} else if s.state.Load() == storeUnknown {
		s.state.CompareAndSwap(storeUnknown, storeDecides)
	}
	if e != nil {
		res := resultOf(&a)
		e.Learn(r.Now.UnixNano(), &res, n)
	}
	return a, nil
}

// claim claims a block of size units for r's tenant, r's cost included,
// and decides r from it: ok false when the store refused the block (or
// counts by transactions), which then decides r on its own.
func (s *leaseStore) claim(ctx context.Context, e *lease.Entry[Request], r *Request, size int64, ls []window.Limit) (Answer, bool, error) {
	c := *r
	c.Cost = size
	a, err := s.Store.Take(ctx, c)
	var res *window.Result
	if err == nil && !a.byTransaction {
		rr := resultOf(&a)
		res = &rr
	}
	st := e.Claimed(r.Now.UnixNano(), size, r.Cost, ls, res, s.slack, c)
	switch {
	case err != nil:
		return Answer{}, false, err
	case a.byTransaction:
		// The store stopped deciding (its scripts refused since): the
		// block was counted whether it fit or not, and is not spent.
		s.state.Store(storeTransacts)
		if a.Allowed {
			s.metrics.leased(leaseExpired, size)
		}
		return Answer{}, false, nil
	case !st.Spent:
		return Answer{}, false, nil
	}
	s.metrics.leased(leaseBlocks, 1)
	e.Arm(func() { s.idle(e) })
	return answerOf(&st, len(ls)), true, nil
}

// idle gives back to the store what is left of e's block when nothing was
// spent from it for lease.IdleAfter, while its windows last.
func (s *leaseStore) idle(e *lease.Entry[Request]) {
	give, marks, r := e.Idle(s.now().UnixNano())
	if give > 0 {
		s.giveBack(r, give, marks)
		e.Given()
	}
}

// giveBack gives units of a block of r's tenant, whose windows marks
// name, back to the store while those windows last: units the store
// cannot take back, it failing, are counted expired.
func (s *leaseStore) giveBack(r Request, units int64, marks store.Marks) {
	now := s.now()
	r.Cost, r.Now, r.Deadline = units, now, now.Add(s.timeout)
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if err := s.giveToStore(ctx, r, marks); err != nil {
		s.metrics.leased(leaseExpired, units)
		return
	}
	s.metrics.leased(leaseGivenBack, units)
}

// Give gives back into the block a decision was made from while it
// lasts (a negative cost charges it), else to the store behind.
func (s *leaseStore) Give(ctx context.Context, r Request, marks store.Marks) error {
	if r.Cost != 0 && r.Algorithm != InFlight {
		var buf [maxKeyLen]byte
		e := s.table.Lookup(r.appendKey(buf[:0]))
		if e != nil && e.Give(r.Now.UnixNano(), r.Cost, &marks, 1+len(r.Quotas)) {
			return nil
		}
	}
	return s.giveToStore(ctx, r, marks)
}

// giveToStore is the store behind's Give of r in the windows marks
// name, whose bucket mark may name a block: a bucket has no windows, and
// the store knows no blocks.
func (s *leaseStore) giveToStore(ctx context.Context, r Request, marks store.Marks) error {
	if r.Algorithm == TokenBucket && marks[0] != noWindow {
		marks[0] = 0
	}
	return s.Store.Give(ctx, r, marks)
}

// Reset drops this replica's block of r's tenant, then resets the store.
func (s *leaseStore) Reset(ctx context.Context, r Request) error {
	var buf [maxKeyLen]byte
	if e := s.table.Lookup(r.appendKey(buf[:0])); e != nil {
		e.Drop()
	}
	return s.Store.Reset(ctx, r)
}

// answerOf is the Answer of a request decided from a block.
func answerOf(st *lease.Step, n int) (a Answer) {
	a.Allowed = st.Spent
	for i := range n {
		a.Counts[i] = st.Counts[i]
	}
	return a
}

// resultOf is a as the window arithmetic has it.
func resultOf(a *Answer) (r window.Result) {
	r.Allowed, r.Counts = a.Allowed, a.Counts
	return r
}
