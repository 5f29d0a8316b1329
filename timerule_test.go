package ratelimit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// ruleProbe is a boundedCounter that records the budget each call got and
// answers with the next of its outcomes.
type ruleProbe struct {
	outcomes []error // nil: a count
	waits    []time.Duration
	ends     []time.Time
}

func (p *ruleProbe) Incr(ctx context.Context, key string, window time.Duration) (int64, error) {
	panic("the limiter must call takeWithin")
}

func (p *ruleProbe) takeWithin(_ context.Context, t take, deadline time.Time, wait time.Duration) (take, error) {
	p.waits, p.ends = append(p.waits, wait), append(p.ends, deadline)
	err := p.outcomes[0]
	p.outcomes = p.outcomes[1:]
	if err != nil {
		return t, err
	}
	t.decided(true, 1, time.Second)
	return t, nil
}

// The time rule, call by call, on a fake clock: the wait each call gets,
// and the error a call that ran out of it reports.
func TestTimeRule(t *testing.T) {
	const timeout = 100 * time.Millisecond
	timedOut := errors.New("increment rate limit key rl:a: " + errTimedOut.Error())
	timedOut = errors.Join(timedOut, errTimedOut)
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
		{"an earlier request deadline shortens it", []call{
			{timedOut, 30 * time.Millisecond, 30 * time.Millisecond, "did not answer within 30ms, before the request's own deadline"},
			{nil, 60 * time.Millisecond, 60 * time.Millisecond, ""},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			probe := &ruleProbe{}
			for _, c := range tt.calls {
				probe.outcomes = append(probe.outcomes, c.outcome)
			}
			rule := &timeRule{timeout: timeout}
			for i, c := range tt.calls {
				clock.Advance(time.Second)
				now := clock.Now()
				ctx := context.Background()
				if c.reqDeadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithDeadline(ctx, now.Add(c.reqDeadline))
					defer cancel()
				}
				_, err := rule.call(ctx, probe, take{key: "rl:a", cost: 1, limit: 10, window: time.Minute}, now)
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
	rule := &timeRule{timeout: defaultStoreTimeout}
	ctx, cancel := context.WithDeadline(context.Background(), clock.Now().Add(-time.Millisecond))
	defer cancel()
	if _, err := rule.call(ctx, probe, take{key: "rl:a", cost: 1, limit: 10, window: time.Minute}, clock.Now()); !errors.Is(err, context.DeadlineExceeded) || len(probe.waits) != 0 {
		t.Fatalf("call = %v after %d counter calls; want context.DeadlineExceeded and none", err, len(probe.waits))
	}
}
