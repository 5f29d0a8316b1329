package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Redis side of a RedisCounter's round trip: the Lua script that counts
// a batch's keys, the script calls that carry a batch to the servers that
// hold its keys, and the reading of their replies.

// takeScript decides a round trip's calls, key by key and, for each key,
// caller by caller in the order they came. KEYS are the keys (for a
// sliding window, the tag of a tenant's keys: see slidingKey); ARGV holds,
// for each key, its algorithm (0 fixed, 1 sliding), limit, window in
// milliseconds, number of callers n, and the n callers' costs. A cost is
// added only when it fits under the limit, so a refused caller spends
// nothing.
//
// For each key it returns a, prev and one value per caller: the key's
// count after the caller's decision, or -count-1 for a refusal. For a
// fixed window, a is the milliseconds it has left and prev is 0; a new
// window is created with its expiry (SET ... PX), so the first request of
// a window starts its clock and no key is ever left without an expiry. For
// a sliding window, a is how far the current window has run on the
// server's clock (TIME) and prev the count of the window before; the
// window's key is "<tag>:<window ms>:<window number>", and expires at the
// end of the window after it. A key that holds something other than a
// count answers a = -3 and fails alone.
const takeScript = `
local out, at, now = {}, 1, nil
local function count(k)
  local v = redis.pcall('GET', k)
  if type(v) == 'table' then return nil end
  if not v then return 0 end
  return tonumber(v)
end
for i, key in ipairs(KEYS) do
  local algo, limit, ms, n = ARGV[at], tonumber(ARGV[at+1]), tonumber(ARGV[at+2]), tonumber(ARGV[at+3])
  local first = at + 4
  at = first + n
  local base = #out
  local a, prev, cur, curkey = 0, 0, nil, key
  if algo == '1' then
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local index = math.floor(now / ms)
    a = now - index * ms
    curkey = key .. ':' .. ARGV[first-2] .. ':' .. string.format('%d', index)
    prev = count(key .. ':' .. ARGV[first-2] .. ':' .. string.format('%d', index - 1))
    cur = count(curkey)
  else
    cur = count(key)
  end
  if prev == nil or cur == nil then
    out[base+1], out[base+2] = -3, 0
    for j = 1, n do out[base+2+j] = 0 end
  else
    local start, weight = cur, 0
    if algo == '1' then weight = prev * (ms - a) / ms end
    for j = 1, n do
      local cost = tonumber(ARGV[first+j-1])
      if weight + cur + cost <= limit then
        cur = cur + cost
        out[base+2+j] = cur
      else
        out[base+2+j] = -cur - 1
      end
    end
    if algo == '1' then
      if cur > start then
        redis.call('INCRBY', curkey, cur - start)
        if start == 0 then redis.call('PEXPIRE', curkey, 2 * ms - a) end
      end
    elseif cur > start and start == 0 and redis.call('EXISTS', key) == 0 then
      redis.call('SET', key, cur, 'PX', ms)
      a = ms
    else
      if cur > start then redis.call('INCRBY', key, cur - start) end
      a = redis.call('PTTL', key)
      if a == -1 then
        redis.call('PEXPIRE', key, ms)
        a = ms
      elseif a == -2 then
        a = ms
      end
    end
    out[base+1], out[base+2] = a, prev
  end
end
return out
`

var takeScriptSHA = redis.NewScript(takeScript).Hash()

// scriptCmd is a call of takeScript that go-redis must never send twice:
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
// takeScript.
type scripter struct {
	rdb   redis.UniversalClient
	route route
	ring  *redis.Ring // when route is byShard
	dials *dialWatch
	// refused is the error of the server that refused to run the script
	// (see noscript.go), shared by a counter's scripters; nil until one
	// does.
	refused *atomic.Pointer[error]
}

// send carries one round trip's ops, as a batcher's sendFunc.
func (s *scripter) send(ctx context.Context, cancel context.CancelFunc, ops []*takeOp) {
	cut := &roundTrip{cancel: cancel}
	s.dials.add(cut)
	defer s.dials.remove(cut)

	if p := s.refused.Load(); p != nil {
		s.withoutScript(ctx, ops, *p, cut.cause())
		return
	}
	groups := s.groups(ops)
	cmds := s.run(ctx, groups, false)
	// A server that lacks the script (it restarted, or SCRIPT FLUSH) ran
	// none of those calls: send them again with the body, which also
	// loads it. One that refuses scripts ran none either.
	var again [][]*takeOp
	var refused []*takeOp
	for i, g := range groups {
		switch err := cmds[i].Err(); {
		case redis.HasErrorPrefix(err, "NOSCRIPT"):
			again = append(again, g)
		case refusesScripts(err):
			s.refused.CompareAndSwap(nil, &err)
			refused = append(refused, g...)
		default:
			answer(g, cmds[i], cut.cause())
		}
	}
	if again != nil {
		for i, cmd := range s.run(ctx, again, true) {
			if err := cmd.Err(); refusesScripts(err) {
				s.refused.CompareAndSwap(nil, &err)
				refused = append(refused, again[i]...)
				continue
			}
			answer(again[i], cmd, cut.cause())
		}
	}
	if refused != nil {
		s.withoutScript(ctx, refused, *s.refused.Load(), cut.cause())
	}
}

// groups splits ops into the script calls of one round trip.
func (s *scripter) groups(ops []*takeOp) [][]*takeOp {
	switch s.route {
	case allKeys:
		return [][]*takeOp{ops}
	case byShard:
		var groups [][]*takeOp
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
	groups := make([][]*takeOp, len(ops))
	for i := range ops {
		groups[i] = ops[i : i+1]
	}
	return groups
}

// run sends one script call per group, in one round trip.
func (s *scripter) run(ctx context.Context, groups [][]*takeOp, body bool) []scriptCmd {
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
func call(ctx context.Context, ops []*takeOp, body bool) scriptCmd {
	args := make([]any, 3, 3+6*len(ops))
	args[0], args[1], args[2] = "evalsha", takeScriptSHA, len(ops)
	if body {
		args[0], args[1] = "eval", takeScript
	}
	for i := range ops {
		args = append(args, ops[i].key)
	}
	for _, op := range ops {
		args = append(args, int(op.algo), op.limit, op.ms, op.stayed())
		args = op.costs(args)
	}
	cmd := redis.NewIntSliceCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	return scriptCmd{cmd}
}

// answer fills in ops' answers from their script call. cause is why the
// round trip was cut short, when it was.
func answer(ops []*takeOp, cmd scriptCmd, cause error) {
	vals, err := cmd.Result()
	want := 0
	for _, op := range ops {
		want += 2 + int(op.stayed())
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
		op.a, op.prev = vals[0], vals[1]
		n := 2 + int(op.stayed())
		op.res, vals = vals[2:n:n], vals[n:]
		if op.a == -3 {
			op.err = errNotCounter
		}
	}
}

var errNotCounter = errors.New("the key holds something other than a count")

// msDuration is ms milliseconds, or the longest Duration for more than
// it holds.
func msDuration(ms int64) time.Duration {
	if ms > math.MaxInt64/int64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(ms) * time.Millisecond
}
