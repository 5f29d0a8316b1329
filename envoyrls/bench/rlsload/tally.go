package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// tally counts the outcomes of calls.
type tally struct {
	ok, over, unknown, deadline, errs atomic.Int64
	firstErr                          atomic.Value // string
}

// record adds one call's outcome.
func (t *tally) record(resp *rlsv3.RateLimitResponse, err error) {
	switch {
	case status.Code(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded):
		t.deadline.Add(1)
	case err != nil:
		t.errs.Add(1)
		t.firstErr.CompareAndSwap(nil, err.Error())
	case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
		t.ok.Add(1)
	case resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
		t.over.Add(1)
	default:
		t.unknown.Add(1)
	}
}

// answered is the calls the server answered in time (any code).
func (t *tally) answered() int64 { return t.ok.Load() + t.over.Load() + t.unknown.Load() }

// letThrough is the calls Envoy's filter would let through with its
// default failure_mode_deny=false: every answer but OVER_LIMIT (Envoy
// maps UNKNOWN to OK), and every error or timeout.
func (t *tally) letThrough() int64 {
	return t.ok.Load() + t.unknown.Load() + t.deadline.Load() + t.errs.Load()
}

// fields renders the counts as key=value pairs; calls is the number of
// calls made, for the share answered in time.
func (t *tally) fields(calls int64) string {
	inTime := 0.0
	if calls > 0 {
		inTime = 100 * float64(t.answered()) / float64(calls)
	}
	return fmt.Sprintf("ok=%d over_limit=%d unknown=%d deadline_exceeded=%d errors=%d envoy_lets_through=%d answered_in_time_pct=%.2f",
		t.ok.Load(), t.over.Load(), t.unknown.Load(), t.deadline.Load(), t.errs.Load(), t.letThrough(), inTime)
}

// callCtx returns the context of one call: with o.timeout as deadline,
// or without one when o.timeout is 0.
func callCtx(o options) (context.Context, context.CancelFunc) {
	if o.timeout <= 0 {
		return context.WithCancel(context.Background())
	}
	return context.WithTimeout(context.Background(), o.timeout)
}

// latencyFields renders the latency percentiles of sorted.
func latencyFields(sorted []time.Duration) string {
	return fmt.Sprintf("p50_ms=%.3f p99_ms=%.3f max_ms=%.3f",
		ms(pct(sorted, 0.50)), ms(pct(sorted, 0.99)), ms(pct(sorted, 1)))
}

// sortDurations sorts d in place and returns it.
func sortDurations(d []time.Duration) []time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d
}
