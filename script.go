package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Redis side of a RedisCounter's round trip: the Lua script that counts
// a batch's keys, the script calls that carry a batch to the servers that
// hold its keys, and the reading of their replies.

// windowScript counts a round trip's keys. KEYS are the keys; ARGV holds,
// for each key, its increment and its window in milliseconds. It returns,
// for each key, its count and the milliseconds its window has left. A key
// that INCRBY refuses (it holds something other than a counter) answers
// 0 and -2, which no counted key can, and the other keys still count.
const windowScript = `
local out = {}
for i, key in ipairs(KEYS) do
  local n = redis.pcall('INCRBY', key, ARGV[2*i-1])
  if type(n) == 'table' then
    out[2*i-1], out[2*i] = 0, -2
  else
    local ttl = redis.call('PTTL', key)
    if ttl < 0 then
      ttl = tonumber(ARGV[2*i])
      redis.call('PEXPIRE', key, ttl)
    end
    out[2*i-1], out[2*i] = n, ttl
  end
end
return out
`

var windowScriptSHA = redis.NewScript(windowScript).Hash()

// scriptCmd is a call of windowScript that go-redis must never send twice:
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

// scripter carries a RedisCounter's batches to Redis as calls of
// windowScript.
type scripter struct {
	rdb   redis.UniversalClient
	route route
	ring  *redis.Ring // when route is byShard
	dials *dialWatch
}

// send carries one round trip's ops, as a batcher's sendFunc.
func (s *scripter) send(ctx context.Context, cancel context.CancelFunc, ops []*incrOp) {
	cut := &roundTrip{cancel: cancel}
	s.dials.add(cut)
	defer s.dials.remove(cut)

	groups := s.groups(ops)
	cmds := s.run(ctx, groups, false)
	// A server that lacks the script (it restarted, or SCRIPT FLUSH) ran
	// none of those calls: send them again with the body, which also
	// loads it.
	var again [][]*incrOp
	for i, g := range groups {
		if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			again = append(again, g)
			continue
		}
		answer(g, cmds[i], cut.cause())
	}
	if again != nil {
		for i, cmd := range s.run(ctx, again, true) {
			answer(again[i], cmd, cut.cause())
		}
	}
}

// groups splits ops into the script calls of one round trip.
func (s *scripter) groups(ops []*incrOp) [][]*incrOp {
	switch s.route {
	case allKeys:
		return [][]*incrOp{ops}
	case byShard:
		var groups [][]*incrOp
		shards := map[*redis.Client]int{}
		for _, op := range ops {
			shard, _ := s.ring.GetShardClientForKey(op.key) // nil: the call fails alone
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
	groups := make([][]*incrOp, len(ops))
	for i := range ops {
		groups[i] = ops[i : i+1]
	}
	return groups
}

// run sends one script call per group, in one round trip.
func (s *scripter) run(ctx context.Context, groups [][]*incrOp, body bool) []scriptCmd {
	cmds := make([]scriptCmd, len(groups))
	for i, g := range groups {
		cmds[i] = call(ctx, g, body)
	}
	if len(cmds) == 1 {
		_ = s.rdb.Process(ctx, cmds[0])
		return cmds
	}
	pipe := s.rdb.Pipeline()
	for _, cmd := range cmds {
		_ = pipe.Process(ctx, cmd)
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}

// call builds the script call for ops: by its digest (EVALSHA), or with its
// body (EVAL) when the server does not have it yet.
func call(ctx context.Context, ops []*incrOp, body bool) scriptCmd {
	args := make([]any, 3, 3+3*len(ops))
	args[0], args[1], args[2] = "evalsha", windowScriptSHA, len(ops)
	if body {
		args[0], args[1] = "eval", windowScript
	}
	for i := range ops {
		args = append(args, ops[i].key)
	}
	for i := range ops {
		args = append(args, ops[i].inc(), ops[i].ms)
	}
	cmd := redis.NewIntSliceCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	return scriptCmd{cmd}
}

// answer fills in ops' answers from their script call. cause is why the
// round trip was cut short, when it was.
func answer(ops []*incrOp, cmd scriptCmd, cause error) {
	vals, err := cmd.Result()
	if err == nil && len(vals) != 2*len(ops) {
		err = fmt.Errorf("window script returned %d values for %d keys", len(vals), len(ops))
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
	for i := range ops {
		ops[i].count, ops[i].ttl = vals[2*i], vals[2*i+1]
		if ops[i].count == 0 && ops[i].ttl == -2 {
			ops[i].err = errNotCounter
		}
	}
}

var errNotCounter = errors.New("INCRBY refused: the key holds something other than a counter")

// ttlOr returns the time left of a PTTL answer, left milliseconds, or the
// whole window of ms when Redis reported no expiry (which the script rules
// out, but a reply is not a promise). Milliseconds past what a Duration
// holds are its longest.
func ttlOr(left, ms int64) time.Duration {
	if left < 0 {
		left = ms
	}
	if left > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(left) * time.Millisecond
}
