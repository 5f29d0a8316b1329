package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/store"
)

// Servers that refuse scripts. Some managed Redis setups grant an ACL
// without scripting (-@scripting), or ship with EVAL disabled; the server
// then answers the script call NOPERM, or that it knows no such command,
// and runs nothing. A RedisCounter learns it from that answer, never from
// a version, and from then on counts its fixed windows with a transaction
// per key instead:
//
//	MULTI
//	SET key 0 PX <window> NX    a new window, with its expiry
//	INCRBY key <costs>          every caller's cost
//	PTTL key
//	EXEC
//
// which counts exactly, and never admits more than the limit: each caller
// is allowed when the count after its own cost is within the limit, as
// the seed's INCR was. What it cannot do without a script is decide before
// adding, so a refused request's cost stays counted: a decrement after the
// fact could land in the window after, or on a key that has expired and so
// leave one without an expiry. A sliding window needs the script; on such
// a server its calls fail with the server's refusal, which the limiter
// logs, and decides by its fail policy.

// refusesScripts reports whether err is a server's refusal to run a
// script at all.
func refusesScripts(err error) bool {
	return strings.Contains(strings.ToLower(refusal(err)), "eval")
}

// noRetryIntCmd is an INCRBY that go-redis must never send twice, nor the
// transaction that carries it.
type noRetryIntCmd struct{ *redis.IntCmd }

func (noRetryIntCmd) NoRetry() bool { return true }

// withoutScript carries ops to a server that refused the script: the fixed
// windows in one transaction per key, the sliding ones failed with
// refusal. cause is why the round trip was cut short, when it was.
func (s *scripter) withoutScript(ctx context.Context, ops []*takeOp, refusal error, cause error) {
	type tx struct {
		op    *takeOp
		incr  noRetryIntCmd
		pttl  *redis.DurationCmd
		costs []int64
	}
	var txs []tx
	pipe := s.ns.rdb.TxPipeline()
	for _, op := range ops {
		if op.kind != store.FixedWindow || op.quotas != nil || op.x != nil {
			op.err = fmt.Errorf("%w, which it refused: %w", errNeedsScripts, refusal)
			continue
		}
		t := tx{op: op}
		var total int64
		for c := range op.costs() {
			t.costs = append(t.costs, c)
			total += c
		}
		pipe.SetArgs(ctx, op.key, 0, redis.SetArgs{Mode: "NX", TTL: msDuration(op.ms)})
		t.incr = noRetryIntCmd{redis.NewIntCmd(ctx, "incrby", op.key, total)}
		_ = pipe.Process(ctx, t.incr)
		t.pttl = pipe.PTTL(ctx, op.key)
		txs = append(txs, t)
	}
	if len(txs) == 0 {
		return
	}
	_, _ = pipe.Exec(ctx)
	for _, t := range txs {
		count, err := t.incr.Result()
		if err == nil {
			err = t.pttl.Err()
		}
		if err != nil {
			if cause != nil && !errors.Is(err, cause) {
				err = cause
			}
			t.op.err = err
			continue
		}
		// The callers' counts, as if each had added its cost in turn.
		t.op.res = make([]int64, len(t.costs))
		for i := len(t.costs) - 1; i >= 0; i-- {
			t.op.res[i] = count
			if count > t.op.limit {
				t.op.res[i] = -count - 1
			}
			count -= t.costs[i]
		}
		t.op.a, t.op.prev = t.op.ms, 0
		if left := t.pttl.Val(); left > 0 {
			t.op.a = left.Milliseconds()
		}
	}
}
