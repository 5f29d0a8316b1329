package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a tb that keeps what a case reported to it.
type recorder struct {
	logs, errs []string
	skipped    string
}

func (r *recorder) Helper()      {}
func (r *recorder) Name() string { return "recorder" }
func (r *recorder) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...) }
func (r *recorder) Fatal(args ...any)                 { r.Errorf("%s", fmt.Sprint(args...)) }
func (r *recorder) Skip(args ...any)                  { r.skipped = fmt.Sprint(args...) }

// An attempt that fails on time is the store's failure: reported at once,
// never made again, whatever the attempts after it would have said. One
// that fails late is made again, and a later one that passes passes the
// case; one whose every attempt failed late reports the last's failures
// and says so. A Fatalf ends its attempt; a Skip skips the case.
func TestRunAttempts(t *testing.T) {
	late := func(d time.Duration) func() time.Duration { return func() time.Duration { return d } }
	for _, c := range []struct {
		name     string
		attempts []func(a *attempt) // the i-th run's behaviour; the last repeats
		runs     int
		errs     []string // what the errors t gets say
		skipped  bool
	}{{
		name: "on time, failed",
		attempts: []func(a *attempt){
			func(a *attempt) { a.late = late(lateBound / 2); a.Errorf("miscounted") },
			func(a *attempt) {},
		},
		runs: 1, errs: []string{"miscounted"},
	}, {
		name: "on time, passed",
		attempts: []func(a *attempt){
			func(a *attempt) { a.late = late(lateBound / 2) },
		},
		runs: 1,
	}, {
		name: "late and passed: not made again",
		attempts: []func(a *attempt){
			func(a *attempt) { a.late = late(10 * lateBound) },
			func(a *attempt) { a.Errorf("must not run") },
		},
		runs: 1,
	}, {
		name: "late, failed, then passed",
		attempts: []func(a *attempt){
			func(a *attempt) { a.late = late(2 * lateBound); a.Fatalf("miscounted late"); a.Errorf("after Fatalf") },
			func(a *attempt) { a.late = late(lateBound / 2) },
		},
		runs: 2,
	}, {
		name: "late, failed, then failed on time",
		attempts: []func(a *attempt){
			func(a *attempt) { a.late = late(2 * lateBound); a.Errorf("late") },
			func(a *attempt) { a.late = late(0); a.Errorf("on time") },
		},
		runs: 2, errs: []string{"on time"},
	}, {
		name: "late every time",
		attempts: []func(a *attempt){
			func(a *attempt) { a.late = late(2 * lateBound); a.Errorf("late") },
		},
		runs: maxAttempts, errs: []string{"late", "each of the 3 attempts ran more than 40ms late"},
	}, {
		name: "skipped",
		attempts: []func(a *attempt){
			func(a *attempt) { a.Skip("not for this store"); a.Errorf("after Skip") },
		},
		runs: 1, skipped: true,
	}} {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{}
			runs := 0
			runAttempts(r, func(a *attempt) {
				runs++
				c.attempts[min(runs, len(c.attempts))-1](a)
			})
			if runs != c.runs {
				t.Errorf("%d attempts; want %d", runs, c.runs)
			}
			if len(r.errs) != len(c.errs) {
				t.Fatalf("errors %q; want %q", r.errs, c.errs)
			}
			for i, e := range r.errs {
				if !strings.Contains(e, c.errs[i]) {
					t.Errorf("error %d: %q; want it to say %q", i, e, c.errs[i])
				}
			}
			if (r.skipped != "") != c.skipped {
				t.Errorf("skipped %q; want a skip: %v", r.skipped, c.skipped)
			}
			if c.runs > 1 && len(r.logs) != c.runs-1 {
				t.Errorf("logs %q; want one for each attempt made again", r.logs)
			}
		})
	}
}
