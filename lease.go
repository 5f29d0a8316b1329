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

// leaseStore is the store of a limiter with Options.Leases, in front of
// the store it was given: a tenant hot on this replica is decided from a
// block of its budget, claimed from that store in one Take of the
// block's size and counted there in every limit of the request, so that
// the replicas together never admit more than the store would; the
// blocks are internal/lease's. Everything else passes through: cold
// tenants, reads (Usage), waiting requests, InFlight, Ping.
type leaseStore struct {
	store.Store
	table   *lease.Table[leaseReq] // a hot key's entry keeps its last claim's request, to give back with
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

// leaseReq is what a hot key's entry keeps of its last claim, to give an
// idle block back with: the budget and the tenant (the entry holds the
// key).
type leaseReq struct {
	budget *store.Budget
	tenant string
}

func newLeaseStore(s store.Store, m *Metrics, now func() time.Time, timeout time.Duration) *leaseStore {
	t := lease.NewTable[leaseReq]()
	t.Expired = func(n int64) { m.leased(leaseExpired, n) }
	return &leaseStore{Store: s, table: t, metrics: m, now: now, timeout: timeout}
}

// Attach attaches the limiter to the store behind.
func (s *leaseStore) Attach(b *store.Budget, plans bool) (store.Info, error) {
	info, err := s.Store.Attach(b, plans)
	if !info.Local {
		s.slack = time.Millisecond
	}
	return info, err
}

// leased reports whether r may be decided from a block: a request that
// takes, now, from a window or a bucket (leasable), of a store that
// decides.
func (s *leaseStore) leased(r *store.Request) bool {
	return leasable(r) && s.state.Load() == storeDecides
}

func leasable(r *store.Request) bool {
	return r.Cost > 0 && r.Delay == 0 && r.Algorithm != InFlight
}

// spend decides r from its tenant's block into res when the block holds
// r's cost, without the store: the Limiter asks this before its
// over-limit cache and its breaker, which a decision from a block has
// nothing to do with. holds says that the block holds part of r's cost:
// the store may then allow r, asked for the rest, where the over-limit
// cache would refuse it.
func (s *leaseStore) spend(r *request, res *store.Result) (spent, holds bool) {
	if !s.leased(&r.Request) {
		return false, false
	}
	e := s.table.Lookup(r.Key)
	if e == nil {
		return false, false
	}
	ls, n := window.Limits(r.Budget)
	st, spent, held := e.Spend(r.Now.UnixNano(), r.Cost, ls[:n])
	if spent {
		answer(res, &st, n)
	}
	return spent, held > 0
}

// Take decides r: from its tenant's block when the tenant is hot here,
// claiming a new block when it runs out; by the store behind for a cold
// tenant, near the limit (where a block is too small to claim), or when a
// claim is refused. Nothing is claimed before the store has answered a
// request as a store that decides, not by a transaction: a claim that a
// transaction refused would stay counted, a whole block of it.
func (s *leaseStore) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	if !leasable(r) {
		return s.direct(ctx, r, res, nil, 0)
	}
	now := r.Now.UnixNano()
	var e *lease.Entry[leaseReq]
	if s.state.Load() == storeDecides {
		e = s.table.Hot(r.Key, r.Cost, now)
	}
	if e == nil {
		// Cold, or asked before the store's first answer: a block may
		// be claimed while it is on its way.
		err := s.direct(ctx, r, res, nil, 0)
		return s.refused(ctx, nil, 0, r, res, err)
	}
	ls, n := window.Limits(r.Budget)
	for first := true; ; first = false {
		st := e.Next(now, r.Cost, ls[:n], first)
		switch {
		case st.Spent:
			answer(res, &st, n)
			return nil
		case st.Wait != nil:
			select {
			case <-st.Wait:
				continue
			case <-ctx.Done(): // the request's doing: not the store's failure
				return fmt.Errorf("%w (%w)", ErrContextDone, ctx.Err())
			}
		case st.Claim > 0:
			if ok, err := s.claim(ctx, e, r, res, st.Claim, ls[:n]); ok || err != nil {
				return err
			}
		}
		err := s.topUp(ctx, r, res, e, n)
		return s.refused(ctx, e, st.Gives, r, res, err)
	}
}

// refused decides r, which the store refused into res (err: it failed),
// from its tenant's block e (nil: the one of r's key, hot since) when
// units came into it while r was on its way, or by the store once more
// when an idle block's units were on their way back to it, or got there
// after gives, e's give-backs when r was sent (see lease.Entry.Refused).
func (s *leaseStore) refused(ctx context.Context, e *lease.Entry[leaseReq], gives uint64, r *store.Request, res *store.Result, err error) error {
	if err != nil || res.Allowed || res.Counted { // (a transaction's refusal stays counted)
		return err
	}
	if e == nil {
		if e = s.table.Lookup(r.Key); e == nil {
			return nil
		}
		gives = e.Gives() // cold when sent: only a give-back in flight counts
	}
	ls, n := window.Limits(r.Budget)
	st, again := e.Refused(r.Now.UnixNano(), r.Cost, ls[:n], gives, ctx.Done())
	switch {
	case st.Spent:
		answer(res, &st, n)
	case again:
		var counts [maxQuotas + 1]store.Count
		b := store.Result{Counts: counts[:n]}
		if err := s.direct(ctx, r, &b, e, n); err == nil {
			res.Allowed, res.Expired, res.Counted = b.Allowed, b.Expired, b.Counted
			copy(res.Counts, b.Counts)
		}
	}
	return nil
}

// topUp decides r by the store behind, asking it only what r's tenant's
// block lacks of r's cost when the block holds some of it (see
// lease.Entry.Hold).
func (s *leaseStore) topUp(ctx context.Context, r *store.Request, res *store.Result, e *lease.Entry[leaseReq], n int) error {
	held, marks := e.Hold(r.Now.UnixNano(), r.Cost)
	if held == 0 {
		return s.direct(ctx, r, res, e, n)
	}
	r.Cost -= held // the rest, asked of the store; r is as it was after
	err := s.direct(ctx, r, res, e, n)
	r.Cost += held
	if (err != nil || !res.Allowed) && !e.Give(r.Now.UnixNano(), held, &marks, n) {
		s.giveBack(r.Key, reqOf(r), held, marks) // its block is gone: to the store
	}
	return err
}

// direct decides r by the store behind, into res, and tells e (nil: none)
// what it said.
func (s *leaseStore) direct(ctx context.Context, r *store.Request, res *store.Result, e *lease.Entry[leaseReq], n int) error {
	if err := s.Store.Take(ctx, r, res); err != nil {
		return err
	}
	if res.Counted {
		s.state.Store(storeTransacts)
	} else if s.state.Load() == storeUnknown {
		s.state.CompareAndSwap(storeUnknown, storeDecides)
	}
	if e != nil {
		e.Learn(r.Now.UnixNano(), res, n)
	}
	return nil
}

// claim claims a block of size units for r's tenant, r's cost included,
// and decides r from it into res: ok false when the store refused the
// block (or counts by transactions), which then decides r on its own.
func (s *leaseStore) claim(ctx context.Context, e *lease.Entry[leaseReq], r *store.Request, res *store.Result, size int64, ls []window.Limit) (bool, error) {
	cost := r.Cost
	r.Cost = size // the block; r is as it was after
	err := s.Store.Take(ctx, r, res)
	r.Cost = cost
	var claimed *store.Result
	if err == nil && !res.Counted {
		claimed = res
	}
	st := e.Claimed(r.Now.UnixNano(), size, r.Cost, ls, claimed, s.slack, reqOf(r))
	switch {
	case err != nil:
		return false, err
	case res.Counted:
		// The store stopped deciding (its scripts refused since): the
		// block was counted whether it fit or not, and is not spent.
		s.state.Store(storeTransacts)
		if res.Allowed {
			s.metrics.leased(leaseExpired, size)
		}
		return false, nil
	case !st.Spent:
		return false, nil
	}
	s.metrics.leased(leaseBlocks, 1)
	e.Arm(func() { s.idle(e) })
	answer(res, &st, len(ls))
	return true, nil
}

// reqOf is what an entry keeps of r, a claim's request.
func reqOf(r *store.Request) leaseReq { return leaseReq{budget: r.Budget, tenant: r.Tenant} }

// idle gives back to the store what is left of e's block when nothing was
// spent from it for lease.IdleAfter, while its windows last.
func (s *leaseStore) idle(e *lease.Entry[leaseReq]) {
	give, marks, r := e.Idle(s.now().UnixNano())
	if give > 0 {
		s.giveBack([]byte(e.Key()), r, give, marks)
		e.Given()
	}
}

// giveBack gives units of a block of r's tenant, under key, whose
// windows marks name, back to the store while those windows last: units
// the store cannot take back, it failing, are counted expired.
func (s *leaseStore) giveBack(key []byte, r leaseReq, units int64, marks store.Marks) {
	now := s.now()
	g := store.Request{Budget: r.budget, Key: key, Tenant: r.tenant, Cost: units, Now: now, Deadline: now.Add(s.timeout)}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if err := s.giveToStore(ctx, &g, marks); err != nil {
		s.metrics.leased(leaseExpired, units)
		return
	}
	s.metrics.leased(leaseGivenBack, units)
}

// Give gives back into the block a decision was made from while it
// lasts (a negative cost charges it), else to the store behind.
func (s *leaseStore) Give(ctx context.Context, r *store.Request, marks store.Marks) error {
	if r.Cost != 0 && r.Algorithm != InFlight {
		e := s.table.Lookup(r.Key)
		if e != nil && e.Give(r.Now.UnixNano(), r.Cost, &marks, 1+len(r.Quotas)) {
			return nil
		}
	}
	return s.giveToStore(ctx, r, marks)
}

// giveToStore is the store behind's Give of r in the windows marks
// name, whose bucket mark may name a block: a bucket has no windows, and
// the store knows no blocks.
func (s *leaseStore) giveToStore(ctx context.Context, r *store.Request, marks store.Marks) error {
	if r.Algorithm == TokenBucket && marks[0] != noWindow {
		marks[0] = 0
	}
	return s.Store.Give(ctx, r, marks)
}

// Reset drops this replica's block of r's tenant, then resets the store.
func (s *leaseStore) Reset(ctx context.Context, r *store.Request) error {
	if e := s.table.Lookup(r.Key); e != nil {
		e.Drop()
	}
	return s.Store.Reset(ctx, r)
}

// answer writes into res the decision of a request from a block, of n
// limits.
func answer(res *store.Result, st *lease.Step, n int) {
	res.Allowed, res.Expired, res.Counted = st.Spent, 0, false
	copy(res.Counts, st.Counts[:n])
}
