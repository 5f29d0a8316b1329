package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/testkit/fakeclock"
	"github.com/gatewaykit/ratelimit/store"
)

// ruleProbe is a store's Take that records the budget each call got (its
// Request's Deadline, from its Now) and answers with the next of its
// outcomes, into res.
type ruleProbe struct {
	outcomes []error // nil: a count
	waits    []time.Duration
	ends     []time.Time
	during   func() // when set, called inside each call
}

func (p *ruleProbe) take(_ context.Context, r *store.Request, res *store.Result) error {
	p.waits, p.ends = append(p.waits, r.Deadline.Sub(r.Now)), append(p.ends, r.Deadline)
	if p.during != nil {
		p.during()
	}
	err := p.outcomes[0]
	p.outcomes = p.outcomes[1:]
	if err != nil {
		return err
	}
	res.Allowed = true
	res.Counts = append(res.Counts[:0], store.Count{N: 1, Fits: true, Left: time.Second, Length: time.Minute})
	return nil
}

// ruleRequest is a request at now.
func ruleRequest(now time.Time) *request {
	r := &request{}
	r.setPlan(&plan{Budget: store.Budget{Prefix: "rl:", Name: "default", Algorithm: store.FixedWindow, Limit: 10, Window: time.Minute}})
	r.Tenant, r.Cost, r.Now = "a", 1, now
	r.Key = append(r.key[:0], "rl:a"...)
	return r
}

// The time rule, call by call, on a fake clock: the wait each call gets,
// and the error a call that ran out of it reports.
func TestTimeRule(t *testing.T) {
	const timeout = 100 * time.Millisecond
	timedOut := fmt.Errorf("increment rate limit key rl:a: no answer in time: %w", context.DeadlineExceeded)
	refused := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")

	type call struct {
		outcome     error
		reqDeadline time.Duration // from now; 0 for none
		wait        time.Duration // the budget the call must get
		log         string        // what its error must say; "" for no error
	}
	for _, tt := range []struct {
		name  string
		calls []call
	}{
		{"an answer ends the connecting allowance", []call{
			{nil, 0, 10 * timeout, ""},
			{nil, 0, timeout, ""},
			{timedOut, 0, timeout, "did not answer within StoreTimeout (100ms)"},
		}},
		{"so does a failure", []call{
			{timedOut, 0, 10 * timeout, "did not answer within 1s, the 10 × StoreTimeout allowed before its first answer"},
			{timedOut, 0, timeout, "did not answer within StoreTimeout (100ms)"},
			{nil, 0, timeout, ""},
		}},
		{"a refused dial is reported as it is", []call{
			{refused, 0, 10 * timeout, "connection refused"},
			{refused, 0, timeout, "connection refused"},
		}},
		{"a request deadline later than the budget does not lengthen it", []call{
			{nil, 0, 10 * timeout, ""},
			{nil, 5 * time.Second, timeout, ""},
			{timedOut, 5 * time.Second, timeout, "did not answer within StoreTimeout (100ms)"},
		}},
		{"an earlier request deadline shortens it, and its end is the request's own", []call{
			{timedOut, 30 * time.Millisecond, 30 * time.Millisecond, ErrContextDone.Error()},
			{nil, 60 * time.Millisecond, 60 * time.Millisecond, ""},
		}},
		{"a request deadline that left StoreTimeout is the counter's failure", []call{
			{nil, 0, 10 * timeout, ""},
			{timedOut, timeout, timeout, "did not answer within StoreTimeout (100ms)"},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// At the real time: the calls' contexts end by it.
			clock := fakeclock.At(time.Now())
			probe := &ruleProbe{}
			for _, c := range tt.calls {
				probe.outcomes = append(probe.outcomes, c.outcome)
			}
			rule := &timeRule{Timeout: timeout}
			for i, c := range tt.calls {
				clock.Advance(time.Second)
				now := clock.Now()
				ctx := context.Background()
				if c.reqDeadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithDeadline(ctx, now.Add(c.reqDeadline))
					defer cancel()
				}
				err := callTimed(ctx, rule, ruleRequest(now), new(store.Result), probe.take)
				if probe.waits[i] != c.wait || !probe.ends[i].Equal(now.Add(c.wait)) {
					t.Errorf("call %d: wait %v until %v; want %v until %v",
						i, probe.waits[i], probe.ends[i].Sub(now), c.wait, c.wait)
				}
				switch {
				case c.log == "" && err != nil:
					t.Errorf("call %d: %v, want no error", i, err)
				case c.log != "" && (err == nil || !strings.Contains(err.Error(), c.log)):
					t.Errorf("call %d: error %v, want one saying %q", i, err, c.log)
				}
			}
		})
	}
}

// A request whose own deadline has passed does not call the counter.
func TestTimeRuleExpiredRequest(t *testing.T) {
	clock := newFakeClock()
	probe := &ruleProbe{}
	rule := &timeRule{Timeout: defaultStoreTimeout}
	ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(-time.Millisecond))
	defer cancel()
	if err := callTimed(ctx, rule, ruleRequest(clock.Now()), new(store.Result), probe.take); !errors.Is(err, ErrContextDone) || !errors.Is(err, context.DeadlineExceeded) || len(probe.waits) != 0 {
		t.Fatalf("call = %v after %d counter calls; want ErrContextDone, context.DeadlineExceeded and none", err, len(probe.waits))
	}
}

// A request whose context is canceled, before the call or during it, gets
// ErrContextDone: the counter neither answered nor failed, so the rule
// still gives the next call the connecting allowance.
func TestTimeRuleCanceledRequest(t *testing.T) {
	clock := fakeclock.At(time.Now())
	rule := &timeRule{Timeout: defaultStoreTimeout}

	before, cancel := context.WithCancel(context.Background())
	cancel()
	probe := &ruleProbe{}
	if err := callTimed(before, rule, ruleRequest(clock.Now()), new(store.Result), probe.take); !errors.Is(err, ErrContextDone) || !errors.Is(err, context.Canceled) || len(probe.waits) != 0 {
		t.Fatalf("canceled before: %v after %d counter calls; want ErrContextDone, context.Canceled and none", err, len(probe.waits))
	}

	during, cancel := context.WithCancel(context.Background())
	defer cancel()
	probe = &ruleProbe{outcomes: []error{fmt.Errorf("increment rate limit key rl:a: %w", context.Canceled), nil}, during: cancel}
	if err := callTimed(during, rule, ruleRequest(clock.Now()), new(store.Result), probe.take); !errors.Is(err, ErrContextDone) || !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled during the call: %v; want ErrContextDone and context.Canceled", err)
	}
	probe.during = nil
	if err := callTimed(context.Background(), rule, ruleRequest(clock.Now()), new(store.Result), probe.take); err != nil || probe.waits[1] != connectFactor*defaultStoreTimeout {
		t.Fatalf("the next call: %v, wait %v; want an answer within the connecting allowance, %v", err, probe.waits[1], connectFactor*defaultStoreTimeout)
	}
}
