package redisstore

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"sync"
	"time"

	"github.com/gatewaykit/ratelimit/internal/timerule"
	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// batcher makes concurrent increments share round trips to the store.
//
// A call joins the batch that is filling. When no round trip is in flight,
// or those in flight are late and fewer than rounds (see rounds), the
// batch leaves at once, so a lone call is never held
// back: on the caller's own goroutine (inline) when the store bounds a
// round trip by its context's deadline and nothing else can end the
// caller's wait, else on another goroutine, which the caller stops waiting
// for when its time is up. After a round trip, the batch that filled
// meanwhile goes next, on the same goroutine or (after an inline one) on
// another, and so on until none is left. Under load each round trip
// therefore carries everything that arrived during the one before, and the
// goroutines are per round trip, never per call.
//
// Calls to one key in one batch become one op, which the store decides
// caller by caller in the order they joined, each with its own cost, so
// every caller of a window still gets a decision and a count of its own.
type batcher struct {
	send   sendFunc
	rounds int           // round trips in flight at most
	late   time.Duration // a round trip out this long lets another go out beside it
	inline bool          // send bounds a round trip by its context's deadline

	mu       sync.Mutex
	inFlight int
	newest   int64  // when the newest round trip in flight went out (monoNow)
	filling  *batch // nil when nothing waits for a round trip

	// idle hands a batch to a goroutine that has made a round trip and
	// waits, for runnerIdle, for another: a new goroutine's stack grows
	// on its first round trip through go-redis, which costs more than
	// the hand-over.
	idle chan *batch
}

const runnerIdle = 250 * time.Millisecond

// How many round trips a batcher has in flight. Normally one, as in a
// group commit: a call that finds none in flight goes out at once, and the
// calls that come while one is in flight go out together as soon as it is
// back, so that a round trip carries everything that arrived during the
// one before, and the batches grow with the load by themselves. More round
// trips in flight make each smaller, which costs Redis more per request (a
// script call costs it about as much again as the keys it carries): at 64
// callers on two cores, four round trips in flight carried 3.3 keys per
// script call against one's 4.1, and gave 2.2-2.3 × the raw MULTI/EXEC
// loop's throughput against 3.5-3.7 × while another benchmark shared the
// cores, 2.9 × against 3.15 × on quiet ones (docs/benchmarks.md at 719ca7e). A round trip that has
// been out for lateRound is late (a connection that lost a packet waits
// 200 ms for its resend): the next batch then goes out beside it, on
// another connection, up to rounds round trips in flight.
const (
	rounds    = 4
	lateRound = 5 * time.Millisecond
)

// sendFunc carries one batch to the store and fills in each op's answer;
// it must never send an op twice. ctx ends at the latest of the callers'
// deadlines, if they all have one, or when the function calls cancel.
type sendFunc func(ctx context.Context, cancel context.CancelFunc, ops []*takeOp)

// newBatcher returns a batcher whose round trips send carries. deadlines
// says that send bounds a round trip by its context's deadline (a Redis
// client with ContextTimeoutEnabled), so that a lone call may make its
// round trip on its own goroutine.
func newBatcher(send sendFunc, deadlines bool) *batcher {
	return &batcher{send: send, rounds: rounds, late: lateRound, inline: deadlines, idle: make(chan *batch)}
}

// batch is the ops of one round trip.
type batch struct {
	ctx      context.Context // its first caller's, whose values (a trace) it carries
	ops      []takeOp
	index    map[opKey]int // ops by key, once there are several
	waiting  int           // callers that still wait for the answer
	deadline time.Time     // the latest of its callers' deadlines
	endless  bool          // some caller has no deadline
	sent     bool
	done     chan struct{} // closed when the answers are in; nil when its one caller sends it inline

	// The first caller's wait, when it has one, is the batch's timer: late
	// is closed at lateAt, when it ends. The callers that joined later wait
	// on until their own deadlines on timers of their own, which a healthy
	// store never makes them start.
	timer  *time.Timer
	late   chan struct{}
	lateAt time.Time
}

// opKey is what makes calls one op: one key, counted alike.
type opKey struct {
	key    string
	ms     int64
	limit  int64
	kind   store.Algorithm
	quotas *quotaArgs // decided together with the key's limit, when not nil
	// A token bucket's burst, interval (µs, window.BucketOf) and how long
	// in µs its callers may wait for their turn.
	burst, delay int64
	iv           float64
	// A call that gives back (Release) or takes slots in flight carries
	// arguments of its own: never one op with another call.
	x *opArgs
}

// opArgs are the arguments of a call that gives back, or takes slots in
// flight (see takeScript, kinds i, x, X and y).
type opArgs struct {
	give    bool
	token   string                  // in flight: the request's slots (slotToken)
	offsets [window.MaxLimits]int64 // giving back a window: where each limit's should be now (offsets)
}

// takeOp is the calls to one key in a batch.
type takeOp struct {
	opKey         // the window is ms milliseconds
	n     int64   // callers that joined; their ordinals are 1 to n
	first int64   // the cost of caller 1
	more  []int64 // the costs of callers 2 to n
	gone  []int64 // ordinals of callers that left before the batch was sent

	// The answer: for each caller that stayed, in order, the key's count
	// after its decision, or -count-1 for a refusal; and for the key, a
	// (the milliseconds a fixed window has left, or how far a sliding
	// window has run) and prev (a sliding window's previous count).
	res     []int64
	a, prev int64
	err     error

	// With quotas: for each limit, the main one first, its a and prev (for
	// a calendar period, its length); res then holds, for each caller in
	// turn, one value per limit.
	heads []int64
}

// stayed is how many of the op's callers still wait for its answer.
func (op *takeOp) stayed() int64 { return op.n - int64(len(op.gone)) }

// costs are the costs of the callers that stayed, in order.
func (op *takeOp) costs() iter.Seq[int64] {
	return func(yield func(int64) bool) {
		for ord := int64(1); ord <= op.n; ord++ {
			if !slices.Contains(op.gone, ord) && !yield(op.cost(ord)) {
				return
			}
		}
	}
}

func (op *takeOp) cost(ord int64) int64 {
	if ord == 1 {
		return op.first
	}
	return op.more[ord-2]
}

// rankOf is the place of the caller with ordinal ord among those that
// stayed, from 0.
func (op *takeOp) rankOf(ord int64) int {
	rank := ord
	for _, g := range op.gone {
		if g < ord {
			rank--
		}
	}
	return int(rank - 1)
}

// values is how many values takeScript returns for each of op's callers:
// none for a give back, which returns one for the key.
func (op *takeOp) values() int {
	if op.x != nil && op.x.give {
		return 0
	}
	return op.limits()
}

// limits is how many limits op's key is decided against.
func (op *takeOp) limits() int {
	if op.quotas == nil {
		return 1
	}
	return op.quotas.n
}

// take has the store decide one call of cost to k, and waits for the
// answer until ctx is done or, when wait is positive, for wait, which ends
// at deadline. A zero deadline is none. The round trip gets the latest of
// its callers' deadlines, which a client that applies deadlines to its
// sockets enforces. The answer is the call's op, answered, and the call's
// rank among its callers (see takeOp.res).
func (b *batcher) take(ctx context.Context, k opKey, cost int64, deadline time.Time, wait time.Duration) (op *takeOp, rank int, err error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err // gone already: never sent
	}
	// Inline only when nothing but the wait can end the call: the store
	// bounds a round trip by its deadline, not by a cancellation.
	inline := b.inline && wait > 0 && ctx.Done() == nil
	bt, pos, ord, start := b.join(ctx, k, cost, deadline, wait, inline)
	if start && inline {
		b.flush(bt)
		if next := b.next(); next != nil {
			b.start(next)
		}
	} else {
		if start {
			b.start(bt)
		}
		if err := b.await(ctx, bt, pos, ord, deadline, wait); err != nil {
			return nil, 0, err
		}
	}
	op = &bt.ops[pos]
	if err := op.err; err != nil {
		if wait > 0 && timerule.IsTimeout(err) {
			// The round trip's deadline, the latest of its callers',
			// passed on the socket before this caller's timer fired.
			err = fmt.Errorf("%w (%w)", errTimedOut, err)
		}
		return nil, 0, err
	}
	return op, op.rankOf(ord), nil
}

// await waits for bt's answer. When the wait or ctx ends first, it
// withdraws the call and returns errTimedOut or ctx's error.
func (b *batcher) await(ctx context.Context, bt *batch, pos int, ord int64, deadline time.Time, wait time.Duration) error {
	var late <-chan struct{} // nil: no wait but ctx's
	own := false             // late is this caller's own timer
	switch {
	case wait <= 0:
	case bt.late != nil && !bt.lateAt.After(deadline) && !fired(bt.late):
		late = bt.late // it fires first: no timer of its own yet
	default:
		late, own = after(wait), true
	}
	for {
		select {
		case <-bt.done:
			return nil
		case <-late:
			if !own {
				// The batch's first caller is out of time; this one
				// may have some left.
				own = true
				if left := deadline.Sub(bt.lateAt); left > 0 {
					late = after(left)
					continue
				}
			}
			if b.leave(bt, pos, ord) {
				return nil
			}
			return errTimedOut
		case <-ctx.Done():
			if b.leave(bt, pos, ord) {
				return nil
			}
			return ctx.Err()
		}
	}
}

// fired reports whether the timer channel c has been closed.
func fired(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// after returns a channel closed after d.
func after(d time.Duration) <-chan struct{} {
	c := make(chan struct{})
	time.AfterFunc(d, func() { close(c) })
	return c
}

// join adds a call to the filling batch and reports its op's position, the
// call's ordinal in the op, and whether the caller must start a round trip.
// The batch gets a timer when it may have to wait for the first caller's
// wait: unless the caller starts it and makes the round trip inline.
func (b *batcher) join(ctx context.Context, k opKey, cost int64, deadline time.Time, wait time.Duration, inline bool) (bt *batch, pos int, ord int64, start bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bt = b.filling
	fresh := bt == nil
	if fresh {
		bt = &batch{ctx: ctx}
		b.filling = bt
	}
	pos = bt.find(k)
	if pos < 0 {
		pos = len(bt.ops)
		bt.ops = append(bt.ops, takeOp{opKey: k, first: cost})
		if bt.index != nil {
			bt.index[k] = pos
		}
	} else {
		bt.ops[pos].more = append(bt.ops[pos].more, cost)
	}
	bt.ops[pos].n++
	ord = bt.ops[pos].n
	bt.waiting++
	if deadline.IsZero() {
		bt.endless = true
	} else if deadline.After(bt.deadline) {
		bt.deadline = deadline
	}
	if b.inFlight == 0 || b.inFlight < b.rounds && time.Duration(monoNow()-b.newest) >= b.late {
		b.inFlight++
		b.newest = monoNow()
		b.filling = nil
		start = true
	}
	if fresh && !(start && inline) {
		// Callers wait for its answer. A batch that its first caller sends
		// inline is out of filling already, so no other caller can join it,
		// and that caller needs neither done nor a timer.
		bt.done = make(chan struct{})
		if wait > 0 {
			late := make(chan struct{})
			bt.late, bt.lateAt = late, deadline
			bt.timer = time.AfterFunc(wait, func() { close(late) })
		}
	}
	return bt, pos, ord, start
}

// find returns the position of k's op in the batch, or -1. A batch looks
// through its first few ops and indexes them when there are more.
func (bt *batch) find(k opKey) int {
	const scan = 8
	if bt.index != nil {
		if pos, ok := bt.index[k]; ok {
			return pos
		}
		return -1
	}
	for i := range bt.ops {
		if bt.ops[i].opKey == k {
			return i
		}
	}
	if len(bt.ops) == scan {
		bt.index = make(map[opKey]int, 2*scan)
		for i := range bt.ops {
			bt.index[bt.ops[i].opKey] = i
		}
	}
	return -1
}

// leave withdraws a caller that stops waiting. It reports whether the
// answer is in after all; if the batch has not been sent (flush marks it
// sent as it reads its ops), the call is taken out of it and will not be
// counted.
func (b *batcher) leave(bt *batch, pos int, ord int64) (answered bool) {
	b.mu.Lock()
	if !bt.sent {
		op := &bt.ops[pos]
		op.gone = append(op.gone, ord)
		bt.waiting--
		b.mu.Unlock()
		return false
	}
	b.mu.Unlock()
	select {
	case <-bt.done:
		return true
	default:
		return false // in flight: the increment may count
	}
}

// start has bt sent by an idle goroutine, or by a new one.
func (b *batcher) start(bt *batch) {
	select {
	case b.idle <- bt:
	default:
		go b.run(bt)
	}
}

// run makes round trips, starting with bt, until no batch waits, then
// waits runnerIdle for start to hand it another.
func (b *batcher) run(bt *batch) {
	for {
		for bt != nil {
			b.flush(bt)
			bt = b.next()
		}
		select {
		case bt = <-b.idle:
		case <-time.After(runnerIdle):
			return
		}
	}
}

// next is called at the end of a round trip. It returns the batch that
// filled meanwhile, to be sent in the same slot of rounds; or nil, freeing
// the slot.
func (b *batcher) next() *batch {
	b.mu.Lock()
	defer b.mu.Unlock()
	bt := b.filling
	b.filling = nil
	if bt != nil && bt.waiting == 0 {
		// Every caller left: nothing to send.
		bt.finish()
		bt = nil
	}
	if bt == nil {
		b.inFlight--
	} else {
		b.newest = monoNow()
	}
	return bt
}

// flush sends bt's ops that still count anything, and closes done. Once
// it has marked bt sent, a caller that leaves may be counted all the same.
func (b *batcher) flush(bt *batch) {
	defer bt.finish()
	b.mu.Lock()
	bt.sent = true
	b.mu.Unlock()
	ops := make([]*takeOp, 0, len(bt.ops))
	for i := range bt.ops {
		if bt.ops[i].stayed() > 0 { // else each of its callers left
			ops = append(ops, &bt.ops[i])
		}
	}
	if len(ops) == 0 {
		return
	}
	// The round trip is every caller's: the first one's cancellation or
	// deadline must not end it (a context that has neither is taken as it
	// is).
	ctx := bt.ctx
	if ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	var cancel context.CancelFunc
	if bt.endless {
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithDeadline(ctx, bt.deadline)
	}
	defer cancel()
	b.send(ctx, cancel, ops)
	var trip uint64
	for _, op := range ops {
		if op.err != nil {
			if trip == 0 {
				trip = tripIDs.Add(1)
			}
			op.err = &tripError{trip: trip, err: op.err}
		}
	}
}

// finish closes done and stops the batch's timer.
func (bt *batch) finish() {
	if bt.done != nil {
		close(bt.done)
	}
	if bt.timer != nil {
		bt.timer.Stop()
	}
}
