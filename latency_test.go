package ratelimit

// What a test that bounds a time measures beside it: the scheduler's own
// lateness (schedProbe), and the latencies of requests, bounded tightly
// at the median and loosely at the tail.

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"
)

// tailSlack is added to every bound on the slowest requests: a small CI
// machine, loaded, under -race, wakes a goroutine late now and then. The
// median gets none. A machine busier than that is measured: see
// schedProbe.
const tailSlack = 150 * time.Millisecond

// schedProbe measures how late the scheduler runs a goroutine that is
// ready: it sleeps 10 ms over and over, and keeps how much longer than
// that each sleep took. Every latency a test measures meanwhile carries
// that lateness, so a test that bounds its slowest requests adds the most
// the probe saw (max), and one that bounds their median adds the median
// lateness (median). On a quiet machine both are a millisecond or less,
// and the bounds stay as tight as they were; a store that waits twice its
// budget, or its client's 3 s, still fails them. A wait long enough to
// meet several stalls carries them all (lateness).
type schedProbe struct {
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	late   latencies
	starts []time.Time // when each nap of late started
}

// probeNap is how long the probe sleeps each time.
const probeNap = 10 * time.Millisecond

// startSchedProbe starts a probe, which runs until halted.
func startSchedProbe() *schedProbe {
	p := &schedProbe{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			start := time.Now()
			select {
			case <-p.stop:
				return
			case <-time.After(probeNap):
			}
			p.mu.Lock()
			p.late = append(p.late, max(time.Since(start)-probeNap, 0))
			p.starts = append(p.starts, start)
			p.mu.Unlock()
		}
	}()
	return p
}

// halt stops the probe; its figures stay. It is safe to call twice.
func (p *schedProbe) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// max is the most a nap overslept so far.
func (p *schedProbe) max() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.late.max()
}

// lateness is how late the scheduler may have run a wait from from to to:
// the most one nap overslept, or, when more, the lateness of all the naps
// that overlapped the wait, added up.
func (p *schedProbe) lateness(from, to time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	// The naps follow each other, so their ends are in order: the first
	// that ends after from is found by halving.
	i := sort.Search(len(p.starts), func(i int) bool {
		return p.starts[i].Add(probeNap + p.late[i]).After(from)
	})
	var sum time.Duration
	for ; i < len(p.starts) && p.starts[i].Before(to); i++ {
		sum += p.late[i]
	}
	return max(p.late.max(), sum)
}

// median is the median oversleep so far.
func (p *schedProbe) median() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.late.median()
}

// String says what the probe saw, for a test's log.
func (p *schedProbe) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("the scheduler ran a 10 ms nap late by a median %v, at most %v",
		p.late.median().Round(100*time.Microsecond), p.late.max().Round(100*time.Microsecond))
}

// checkLatencies fails t unless every latency of d is at least lo and at
// most hi, and their median at most median, each bound above carrying the
// lateness that late measured meanwhile (its median on the median, its
// most on hi). An empty d passes: the callers that must have latencies
// check that they have.
func checkLatencies(t *testing.T, what string, d latencies, late *schedProbe, lo, median, hi time.Duration) {
	t.Helper()
	if len(d) == 0 {
		return
	}
	median, hi = median+late.median(), hi+late.max()
	if d.min() < lo || d.median() > median || d.max() > hi {
		t.Errorf("%s: %s; want each at least %v, the median at most %v and each at most %v (%v)", what, d, lo, median, hi, late)
	}
}

// latencies are the durations of requests or of counter calls. The timing
// tests bound their median tightly, which a store that costs a little more
// per request moves, and their tail loosely, which a loaded CI machine
// moves now and then.
type latencies []time.Duration

// percentile returns the p-th percentile, by the nearest rank; 0 when there
// are none.
func (d latencies) percentile(p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	rank := (p*len(s) + 99) / 100 // ceil(p/100 × n)
	return s[max(rank, 1)-1]
}

func (d latencies) median() time.Duration { return d.percentile(50) }

func (d latencies) max() time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Max(d)
}

func (d latencies) min() time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Min(d)
}

func (d latencies) String() string {
	if len(d) == 0 {
		return "none"
	}
	r := func(x time.Duration) time.Duration { return x.Round(100 * time.Microsecond) }
	if len(d) == 1 {
		return r(d[0]).String()
	}
	return fmt.Sprintf("%d: min %v, p50 %v, p99 %v, max %v",
		len(d), r(d.min()), r(d.median()), r(d.percentile(99)), r(d.max()))
}

// timed returns how long f took.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// TestSchedProbeLateness checks the sum over the naps a wait overlapped,
// and that the one latest nap is the least it carries.
func TestSchedProbeLateness(t *testing.T) {
	t0 := time.Unix(0, 0)
	p := &schedProbe{}
	at := t0
	for _, late := range []time.Duration{0, 30 * time.Millisecond, 0, 200 * time.Millisecond, 5 * time.Millisecond, 0} {
		p.starts, p.late = append(p.starts, at), append(p.late, late)
		at = at.Add(probeNap + late)
	}
	// The naps: [0,10) [10,50) [50,60) [60,270) [270,285) [285,295) ms.
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		from, to int
		want     time.Duration
	}{
		{0, 5, 200 * time.Millisecond},    // one quiet nap: the latest nap
		{20, 280, 235 * time.Millisecond}, // three late naps
		{55, 300, 205 * time.Millisecond}, // from the third nap on
		{300, 400, 200 * time.Millisecond},
	} {
		if got := p.lateness(ms(tc.from), ms(tc.to)); got != tc.want {
			t.Errorf("lateness from %d to %d ms = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}
