package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// The Redis side of a round trip: the calls of the Lua (library.go) that
// carry a batch to the servers that hold its keys, and the reading of
// their replies.

// scriptCmd is a call of the Lua that go-redis must never send twice:
// a command whose reply is lost may have run, and sending it again would
// count its requests twice.
type scriptCmd struct{ *redis.IntSliceCmd }

func (scriptCmd) NoRetry() bool { return true }

// route is how a round trip's keys map onto script calls.
type route int8

const (
	allKeys route = iota // one server: one call for every key
	byShard              // a Ring: one call per shard
	byKey                // a cluster, or a client of unknown shape: one per key
)

// scripter carries a node's batches to Redis as calls of the Lua, through
// the counter's client, as its nodes route them.
type scripter struct {
	ns    *nodes
	dials *dialWatch // the node's
}

// send carries one round trip's ops, as a batcher's sendFunc.
func (s *scripter) send(ctx context.Context, cancel context.CancelFunc, ops []*takeOp) {
	cut := &roundTrip{cancel: cancel}
	s.dials.add(cut)
	defer s.dials.remove(cut)

	// A call that failed having run nothing goes again, at most resends times:
	// a server that lacks the library or the script (it restarted, or was
	// flushed) or cannot run the library (Redis 6) gets it again as the
	// nodes say (library.go); one that refuses scripts has the rest
	// counted without them.
	groups, v := s.groups(ops), s.ns.verb()
	for try := 0; len(groups) > 0; try++ {
		if p := s.ns.refused.Load(); p != nil {
			var rest []*takeOp
			for _, g := range groups {
				rest = append(rest, g...)
			}
			s.withoutScript(ctx, rest, *p, cut.cause())
			return
		}
		cmds := s.run(ctx, groups, v)
		var again [][]*takeOp
		for i, g := range groups {
			err := cmds[i].Err()
			if err == nil { // the usual case: go-redis's error checks allocate
				answer(g, cmds[i], cut.cause())
				continue
			}
			if refusesScripts(err) {
				s.ns.refused.CompareAndSwap(nil, &err)
				again = append(again, g)
				continue
			}
			retry, how, failed := false, v, error(nil)
			if try < resends {
				retry, how, failed = s.ns.retry(ctx, err, g[0].key)
			}
			switch {
			case retry:
				v = max(v, how) // a body loads the script for all
				again = append(again, g)
			case failed != nil:
				cmds[i].SetErr(failed)
				answer(g, cmds[i], cut.cause())
			default:
				answer(g, cmds[i], cut.cause())
			}
		}
		groups = again
	}
}

// groups splits ops into the script calls of one round trip.
func (s *scripter) groups(ops []*takeOp) [][]*takeOp {
	switch s.ns.route {
	case allKeys:
		return [][]*takeOp{ops}
	case byShard:
		var groups [][]*takeOp
		shards := map[*redis.Client]int{}
		for _, op := range ops {
			shard, _ := s.ns.ring.GetShardClientForKey(op.key) // nil: the call fails alone
			i, ok := shards[shard]
			if !ok {
				i = len(groups)
				shards[shard] = i
				groups = append(groups, nil)
			}
			groups[i] = append(groups[i], op)
		}
		return groups
	}
	groups := make([][]*takeOp, len(ops))
	for i := range ops {
		groups[i] = ops[i : i+1]
	}
	return groups
}

// run sends one call of the Lua per group, in one round trip.
func (s *scripter) run(ctx context.Context, groups [][]*takeOp, v verb) []scriptCmd {
	cmds := make([]scriptCmd, len(groups))
	for i, g := range groups {
		cmds[i] = call(ctx, g, v)
	}
	if len(cmds) == 1 {
		_ = s.ns.rdb.Process(ctx, cmds[0])
		return cmds
	}
	pipe := s.ns.rdb.Pipeline()
	for _, cmd := range cmds {
		_ = pipe.Process(ctx, cmd)
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}

// call builds the call of the Lua for ops, sent as v.
func call(ctx context.Context, ops []*takeOp, v verb) scriptCmd {
	// The quota sets of the call, each described once, before the keys'
	// own arguments (see take.lua).
	var sets []*quotaArgs
	setOf := func(op *takeOp) int {
		for i, s := range sets {
			if s == op.quotas {
				return i + 1
			}
		}
		sets = append(sets, op.quotas)
		return len(sets)
	}
	setArgs := 0
	for _, op := range ops {
		if op.quotas != nil && setOf(op) == len(sets) {
			setArgs += len(op.quotas.args)
		}
	}
	args := make([]any, 3, 3+len(ops)+2+setArgs+4*len(ops)+2)
	args[0], args[1], args[2] = v.args(takeFunction, len(ops))
	for i := range ops {
		args = append(args, ops[i].key)
	}
	if len(sets) > 0 {
		args = append(args, "Q", hexArg(int64(len(sets))))
		for _, s := range sets {
			args = append(args, s.args...)
		}
	}
	// The ops of one limiter share a limit and a window: each is written
	// once per call, and only boxed again when it changes.
	var limit, ms int64 = -1, -1
	var limitArg, msArg any
	for _, op := range ops {
		if op.limit != limit {
			limit, limitArg = op.limit, strconv.FormatInt(op.limit, 16)
		}
		if op.ms != ms {
			ms, msArg = op.ms, op.ms
		}
		kind, n := window.Kind(op.kind), op.stayed()
		one := n == 1 && op.first == 1 && len(op.gone) == 0
		if op.x != nil {
			args = op.x.append(args, op, setOf, limitArg, msArg)
			continue
		}
		switch {
		case op.kind == store.TokenBucket:
			args = op.bucketArgs(args, one, setOf)
			if one {
				continue
			}
		case op.quotas != nil && one:
			args = append(args, "g", hexArg(int64(setOf(op))), limitArg, msArg)
			continue
		case op.quotas != nil:
			args = append(args, "G", hexArg(int64(setOf(op))), limitArg, msArg)
		case one:
			args = append(args, kindOne[kind], limitArg, msArg)
			continue
		default:
			args = append(args, kindAny[kind], limitArg, msArg)
		}
		args = append(args, hexArg(n))
		for c := range op.costs() {
			args = append(args, hexArg(c))
		}
	}
	cmd := redis.NewIntSliceCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	return scriptCmd{cmd}
}

// append appends the arguments of op, a call with x's arguments, to
// args; setOf numbers its quota set.
func (x *opArgs) append(args []any, op *takeOp, setOf func(*takeOp) int, limitArg, msArg any) []any {
	cost := hexArg(op.first)
	switch {
	case !x.give:
		return append(args, "i", limitArg, msArg, x.token, cost)
	case op.kind == store.InFlight:
		return append(args, "y", x.token, cost)
	case op.quotas != nil && op.kind == store.TokenBucket:
		b := argsOfBucket(bucketSpec{op.burst, op.iv, 0})
		args = append(args, "X", hexArg(int64(setOf(op))), b.burst, b.iv, 0, cost)
		for j := range op.limits() {
			args = append(args, x.offsets[j])
		}
		return args
	case op.kind == store.TokenBucket:
		return append(args, "x", "b", argsOfBucket(bucketSpec{op.burst, op.iv, 0}).iv, cost, 0)
	case op.quotas != nil:
		args = append(args, "X", hexArg(int64(setOf(op))), limitArg, msArg, cost)
		for j := range op.limits() {
			args = append(args, x.offsets[j])
		}
		return args
	}
	return append(args, "x", kindOne[window.Kind(op.kind)], msArg, cost, x.offsets[0])
}

// bucketArgs appends the arguments of op, a token bucket's, to args, but
// for its callers' costs when it has more than one of cost 1 (one).
func (op *takeOp) bucketArgs(args []any, one bool, setOf func(*takeOp) int) []any {
	b := argsOfBucket(bucketSpec{op.burst, op.iv, op.delay})
	if op.quotas != nil {
		// In a tenant's hash: the burst, the interval and the delay.
		kind := "G"
		if one {
			kind = "g"
		}
		return append(args, kind, hexArg(int64(setOf(op))), b.burst, b.iv, op.delay)
	}
	if one {
		return append(args, "b", b.iv, b.most, b.px)
	}
	return append(args, "B", b.iv, b.most, b.px)
}

// hexArg is n in hexadecimal, as an argument of the Lua: boxed once for
// the small numbers that most are.
func hexArg(n int64) any {
	if n >= 0 && n < int64(len(smallHex)) {
		return smallHex[n]
	}
	return strconv.FormatInt(n, 16)
}

var smallHex = func() (h [256]any) {
	for i := range h {
		h[i] = strconv.FormatInt(int64(i), 16)
	}
	return h
}()

// The kinds of a key in the Lua's ARGV: [0] a fixed window, [1] a
// sliding one.
var (
	kindOne = [2]any{"f", "s"} // one caller, of cost 1
	kindAny = [2]any{"F", "S"} // any callers and costs
)

// answer fills in ops' answers from their script call. cause is why the
// round trip was cut short, when it was.
func answer(ops []*takeOp, cmd scriptCmd, cause error) {
	vals, err := cmd.Result()
	want := 0
	for _, op := range ops {
		want += head(op) + int(op.stayed())*op.values()
	}
	if err == nil && len(vals) != want {
		err = fmt.Errorf("take script returned %d values for %d keys, want %d", len(vals), len(ops), want)
	}
	if err != nil {
		if cause != nil && !errors.Is(err, cause) {
			err = cause
		}
		for i := range ops {
			ops[i].err = err
		}
		return
	}
	for _, op := range ops {
		h := head(op)
		op.a, op.prev = vals[0], 0
		if h == 2 {
			op.prev = vals[1]
		}
		if op.quotas != nil {
			op.heads = vals[:h:h]
		}
		n := h + int(op.stayed())*op.values()
		op.res, vals = vals[h:n:n], vals[n:]
		if op.a == -3 {
			op.err = errNotCounter
		}
	}
}

// head is how many values the Lua returns for op's key before its
// callers' own: a, and for a sliding window prev; with quotas, both for
// each limit.
func head(op *takeOp) int {
	if op.x != nil {
		return 1 // an in-flight take's slots dropped, or what was given back
	}
	if op.quotas != nil {
		return 2 * op.limits()
	}
	if op.kind == store.SlidingWindow {
		return 2
	}
	return 1
}

// msDuration is ms milliseconds, or the longest Duration for more than
// it holds.
func msDuration(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}
