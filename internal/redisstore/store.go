// Package redisstore is the engine of ratelimit.RedisCounter: the Lua
// script that decides in Redis, the batcher that lets calls share round
// trips, the nodes of a cluster or ring with their round trips and dial
// watches, the path for servers that refuse scripts, and what Redis's
// answers mean. It decides a store.Request under a key string that the
// caller gives (the form Redis counts it under), with the window
// package's arithmetic; the ratelimit package's RedisCounter is its
// public face.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/internal/mono"
	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// Store is a RedisCounter's engine: its client's nodes, each with round
// trips of its own. It is safe for concurrent use by multiple goroutines.
type Store struct {
	nodes *nodes
}

// New returns the engine of a counter on rdb, which stays the caller's;
// the engine adds dial hooks to it (see dialwatch.go).
func New(rdb redis.UniversalClient) *Store { return &Store{nodes: newNodes(rdb)} }

// Node returns key's server: its number (0, 1, ...) and address.
func (s *Store) Node(key string) (id int, addr string) {
	n := s.nodes.of(key)
	return n.id, n.addr
}

// ManyNodes reports whether the keys may live on several servers.
func (s *Store) ManyNodes() bool { return s.nodes.manyNodes() }

// ScriptRefusal is a server's refusal to run the script, with what to
// fix, or nil: fixed windows then count by transactions (see
// noscript.go).
func (s *Store) ScriptRefusal() error {
	if p := s.nodes.refused.Load(); p != nil {
		return &misconfigured{*p, "grant the user " + ACLFixed + " to decide in the store"}
	}
	return nil
}

// monoNow is the process's monotonic clock, in nanoseconds since its
// epoch: what a window is marked on (see Give).
func monoNow() int64 { return int64(mono.Now()) }

// Incr adds 1 to key's fixed window of width and returns the count after
// it. Redis keeps expiries in milliseconds, so a width that is not a whole
// number of milliseconds is rounded up to the next one.
func (s *Store) Incr(ctx context.Context, key string, width time.Duration) (int64, error) {
	b := store.Budget{Limit: math.MaxInt64, Window: width}
	r := store.Request{Budget: &b, Cost: 1}
	var counts [1]store.Count
	res := store.Result{Counts: counts[:]}
	// No wait of its own: ctx alone bounds it, and its deadline the round
	// trip's.
	deadline, _ := ctx.Deadline()
	if err := s.take(ctx, key, &r, deadline, 0, &res); err != nil {
		return 0, err
	}
	return res.Counts[0].N, nil
}

// Take decides r for key in one round trip, shared with other calls,
// giving up with errTimedOut after r.Wait(), when it is positive, which
// ends at r.Deadline; it writes what it decided into res, whose Counts
// hold one for each of r's limits. A tenant with quotas is decided in its
// hash, key. Each limit is marked, for Give, on the process's monotonic
// clock by where the script reported its window: a fixed window by when
// it is to end, a sliding one by when it started. res.Counted reports
// that a server that refuses scripts counted a fixed window by a
// transaction, refused or not.
func (s *Store) Take(ctx context.Context, key string, r *store.Request, res *store.Result) error {
	return s.take(ctx, key, r, r.Deadline, r.Wait(), res)
}

// take is Take with the wait and its deadline given apart from r.
func (s *Store) take(ctx context.Context, key string, r *store.Request, deadline time.Time, wait time.Duration, res *store.Result) error {
	op, rank, err := s.send(ctx, key, r, nil, deadline, wait, "increment")
	if err != nil {
		return err
	}
	now := monoNow()
	res.Expired, res.Counted = 0, false
	switch {
	case r.Algorithm == store.InFlight:
		res.Expired = op.a
		used, fits := op.res[rank], true
		if used < 0 {
			used, fits = -used-1, false
		}
		res.Allowed, res.Counts[0] = fits, store.Count{N: used, Fits: fits, Left: r.Window, Length: r.Window}
		return nil
	case len(r.Quotas) > 0:
		ls, n := window.Limits(r.Budget)
		vals := op.res[rank*n : (rank+1)*n]
		res.Allowed = true
		for j := range n {
			res.Counts[j] = state(&ls[j], vals[j], op.heads[2*j], op.heads[2*j+1], now)
			res.Allowed = res.Allowed && res.Counts[j].Fits
		}
		return nil
	}
	res.Counted = r.Algorithm == store.FixedWindow && s.nodes.refused.Load() != nil
	main := window.Main(r.Budget)
	res.Counts[0] = state(&main, op.res[rank], op.a, op.prev, now)
	res.Allowed = res.Counts[0].Fits
	return nil
}

// state is what the script answered of limit l, at now: v, its count after
// the decision or -count-1 where the cost did not fit; and a and b, for a
// fixed window the milliseconds it has left, for a sliding one how far it
// has run and its previous count, for a calendar period the milliseconds
// to its end and its length.
func state(l *window.Limit, v, a, b, now int64) store.Count {
	if l.Kind == store.TokenBucket && l.Calendar == 0 {
		// v is the µs until the bucket is full again, or -that-1.
		if v < 0 {
			return l.Bucket().State(float64(-v-1), false)
		}
		return l.Bucket().State(float64(v), true)
	}
	st := store.Count{N: v, Fits: v >= 0, Length: msWindow(l.Window)}
	if v < 0 {
		st.N = -v - 1
	}
	switch {
	case l.Calendar != 0:
		st.Left, st.Length = msDuration(a), msDuration(b)
		st.Mark = now + int64(st.Left)
	case l.Kind == store.SlidingWindow:
		st.Left, st.Prev = st.Length-msDuration(a), b
		st.Mark = now - msDuration(a).Nanoseconds()
	default:
		st.Left = msDuration(a)
		st.Mark = now + int64(st.Left)
	}
	return st
}

// msWindow is a window as the script counts it, in whole milliseconds.
func msWindow(w time.Duration) time.Duration {
	return time.Duration(window.CeilDiv(w, time.Millisecond)) * time.Millisecond
}

// Give gives back what a Take of r took, r being as Take was given it
// and marks the Marks of Take's counts, in one round trip shared with
// other calls, bounded as Take's is: r.Cost in each limit whose window is
// still the one its mark names, or, for an InFlight limit, the slots of
// r.Slot; a negative r.Cost charges -r.Cost in those windows instead,
// past the limit if need be, and never in a window that has gone (its
// key expired or deleted) or a new one. Windows live on the server's
// clock, which a replica cannot read: the script is told where each
// window should be now by its mark (its offset: the milliseconds a fixed
// window or a period has left, or a sliding window has run), and gives
// back in a window whose offset is within half its length of that. The
// next window of a key is a whole length away, and the error, the round
// trips' latency, is far less.
func (s *Store) Give(ctx context.Context, key string, r *store.Request, marks store.Marks) error {
	if r.Algorithm == store.TokenBucket && len(r.Quotas) == 0 && marks[0] == store.NoWindow {
		return nil // a mark that names no window leaves the bucket alone
	}
	x := &opArgs{give: true}
	if r.Algorithm == store.InFlight {
		x.token = slotToken(r.Slot)
	} else {
		x.offsets = offsets(r.Budget, &marks, monoNow())
	}
	_, _, err := s.send(ctx, key, r, x, r.Deadline, r.Wait(), "give back to")
	return err
}

// offsets are where the windows that marks name, of a request of b,
// should be now, as the script measures them: for each limit, the
// milliseconds a fixed window or a period has left, or a sliding window
// has run, from its mark; for a bucket, which has no windows, 0, or 1 for
// store.NoWindow, which leaves it alone.
func offsets(b *store.Budget, marks *store.Marks, now int64) (off [window.MaxLimits]int64) {
	ls, n := window.Limits(b)
	for j := range n {
		if ls[j].Kind == store.TokenBucket && ls[j].Calendar == 0 {
			if marks[j] == store.NoWindow {
				off[j] = 1
			}
			continue
		}
		d := marks[j] - now
		if ls[j].Kind == store.SlidingWindow && ls[j].Calendar == 0 {
			d = -d
		}
		off[j] = d / int64(time.Millisecond)
	}
	return off
}

// send has key's node decide r (with x's arguments, when it gives back or
// takes slots) and returns its op, answered, and the call's rank in it.
func (s *Store) send(ctx context.Context, key string, r *store.Request, x *opArgs, deadline time.Time, wait time.Duration, verb string) (*takeOp, int, error) {
	if r.Window <= 0 {
		return nil, 0, fmt.Errorf("%s rate limit key %s: window %v is not positive", verb, key, r.Window)
	}
	k := opKey{key: key, ms: window.CeilDiv(r.Window, time.Millisecond), limit: r.Limit, kind: r.Algorithm, x: x}
	if r.Algorithm == store.TokenBucket {
		main := window.Main(r.Budget)
		k.burst, k.iv, k.delay = r.Burst, main.Bucket().Interval, window.CeilDiv(r.Delay, time.Microsecond)
	}
	if len(r.Quotas) > 0 {
		k.quotas = argsOf(r)
	}
	if r.Algorithm == store.InFlight && x == nil {
		k.x = &opArgs{token: slotToken(r.Slot)}
	}
	n := s.nodes.of(key)
	op, rank, err := n.batch.take(ctx, k, r.Cost, deadline, wait)
	if err != nil {
		return nil, 0, fmt.Errorf("%s rate limit key %s: %w", verb, key, n.auth.name(classify(err, s.nodes.cluster != nil)))
	}
	n.auth.name(nil)
	return op, rank, nil
}

// Read fills in res with what key holds of r's limits, changing nothing,
// in one script call outside any batch. ctx bounds it, and so does r.Wait()
// when positive: the read is left to finish on its own then, as a batch's
// caller leaves, and Read returns errTimedOut.
func (s *Store) Read(ctx context.Context, key string, r *store.Request, res *store.Result) error {
	vals, err := s.evalWithin(ctx, readFunction, key, limitArgs("U", r), r.Wait())
	ls, n := window.Limits(r.Budget)
	if err == nil && len(vals) != 3*n {
		err = fmt.Errorf("the script returned %d values for %d limits", len(vals), n)
	}
	if err != nil {
		return err
	}
	res.Allowed, res.Expired, res.Counted = true, 0, false
	now := monoNow()
	for j := range n {
		a, b, count := vals[3*j], vals[3*j+1], vals[3*j+2]
		switch l := &ls[j]; {
		case l.Kind == store.InFlight:
			res.Counts[j] = store.Count{N: count, Fits: true, Left: l.Window, Length: msWindow(l.Window)}
		case l.Kind == store.FixedWindow && l.Calendar == 0 && a <= 0:
			// No window runs (-2), or a count without an expiry (-1),
			// which the next request mends.
			res.Counts[j] = store.Count{N: count, Fits: true, Left: l.Window, Length: msWindow(l.Window), Mark: store.NoWindow}
		default:
			res.Counts[j] = state(l, count, a, b, now) // marked as a Take's, for Give
		}
	}
	return nil
}

// Reset deletes the keys of r's limits for key, in one script call that
// ctx alone bounds.
func (s *Store) Reset(ctx context.Context, key string, r *store.Request) error {
	_, err := s.eval(ctx, takeFunction, key, limitArgs("R", r))
	return err
}

// limitArgs is the arguments of the script for a key of r's limits, of
// kind U (usage) or R (reset), or without quotas u or r.
func limitArgs(kind string, r *store.Request) []any {
	ms := window.CeilDiv(r.Window, time.Millisecond)
	main := window.Main(r.Budget)
	switch {
	case r.Algorithm == store.InFlight:
		return []any{strings.ToLower(kind), "i", ms}
	case r.Algorithm == store.TokenBucket && len(r.Quotas) == 0:
		return []any{strings.ToLower(kind), "b", ivArg(main.Bucket().Interval)}
	case len(r.Quotas) == 0:
		return []any{strings.ToLower(kind), kindOne[window.Kind(r.Algorithm)], ms}
	}
	args := append([]any{"Q", "1"}, argsOf(r).args...)
	if r.Algorithm == store.TokenBucket {
		return append(args, kind, "1", strconv.FormatInt(r.Burst, 16), ivArg(main.Bucket().Interval), 0)
	}
	return append(args, kind, "1", strconv.FormatInt(r.Limit, 16), ms)
}

// evalWithin is eval, given up after wait when it is positive: the client
// of the user's options may wait on a silent server far longer (its read
// timeout) than the caller may.
func (s *Store) evalWithin(ctx context.Context, function, key string, args []any, wait time.Duration) ([]int64, error) {
	if wait <= 0 {
		return s.eval(ctx, function, key, args)
	}
	type answer struct {
		vals []int64
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		vals, err := s.eval(ctx, function, key, args)
		done <- answer{vals, err}
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case a := <-done:
		return a.vals, a.err
	case <-t.C:
		return nil, errTimedOut
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// eval runs the Lua's function on key with args, outside any batch,
// sent again as the engine says when it ran nothing (library.go). A
// server that cannot be reached fails it at once, with the dial's error,
// as it fails a round trip.
func (s *Store) eval(ctx context.Context, function, key string, args []any) ([]int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cut := &roundTrip{cancel: cancel}
	n := s.nodes.of(key)
	n.dials.add(cut)
	defer n.dials.remove(cut)

	v := s.nodes.verb()
	var cmd *redis.Cmd
	for try := 0; ; try++ {
		verb, name, nkeys := v.args(function, 1)
		cmd = redis.NewCmd(ctx, append([]any{verb, name, nkeys, key}, args...)...)
		cmd.SetFirstKeyPos(3)
		_ = s.nodes.rdb.Process(ctx, cmd)
		err := cmd.Err()
		if err == nil || try == resends {
			break
		}
		again, how, failed := s.nodes.retry(ctx, err, key)
		if failed != nil {
			cmd.SetErr(failed)
		}
		if !again {
			break
		}
		v = how
	}
	vals, err := cmd.Int64Slice()
	if c := cut.cause(); err != nil && c != nil {
		err = c
	}
	if err != nil {
		return nil, n.auth.name(classify(err, s.nodes.cluster != nil))
	}
	n.auth.name(nil)
	return vals, nil
}

// Ping checks every server the client knows (a cluster's primaries, a
// ring's shards): PING, and for a client that does not follow a cluster,
// that its servers are not cluster nodes.
func (s *Store) Ping(ctx context.Context) error {
	cluster := s.nodes.cluster != nil
	check := func(ctx context.Context, c *redis.Client) error {
		err := c.Ping(ctx).Err()
		if err == nil && !cluster && clusterNode(ctx, c) {
			err = &misconfigured{errors.New("the server runs in cluster mode"), fixClusterNode}
		}
		if err != nil {
			return fmt.Errorf("redis at %s: %w", c.Options().Addr, classify(err, cluster))
		}
		return nil
	}
	known, err := EachServer(ctx, s.nodes.rdb, check)
	if !known {
		err = classify(s.nodes.rdb.Ping(ctx).Err(), cluster)
	}
	return err
}

// clusterNode reports whether c's server runs in cluster mode, as HELLO
// (Redis 6.2 and newer, which Redis 7 lets every user run) or INFO server
// says; false when it says neither, as to an ACL user of Redis 6 without
// +info.
func clusterNode(ctx context.Context, c *redis.Client) bool {
	if v, err := c.Do(ctx, "hello").Result(); err == nil {
		return helloField(v, "mode") == "cluster"
	}
	info, err := c.Info(ctx, "server").Result()
	return err == nil && strings.Contains(info, "redis_mode:cluster")
}

// helloField returns the string field name of a HELLO reply: a map in
// RESP3, a list of names and values in RESP2.
func helloField(reply any, name string) string {
	switch r := reply.(type) {
	case map[any]any:
		s, _ := r[name].(string)
		return s
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			if k, _ := r[i].(string); k == name {
				s, _ := r[i+1].(string)
				return s
			}
		}
	}
	return ""
}
