package storetest

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// A store on a clock of its own is stepped by sleeping, so a busy
// machine can make a case's steps land later than the case planned (a
// 10 ms sleep has been seen to oversleep by 250 ms), and a clause checked
// at the wrong moment of a window fails a store that kept it. The case's
// own run measures how late it was: the time it took beyond the sleeps it
// asked for. Its clauses allow lateBound (a token bucket of 10 a second
// gives a unit back every 100 ms; a window of 300 ms is stepped past by
// 50 ms at least), so an attempt that failed and ran later than that says
// nothing about the store, and is made again on new tenants, up to
// maxAttempts in all. An attempt that failed on time is the store's
// failure, and is reported at once.
const (
	lateBound   = 40 * time.Millisecond
	maxAttempts = 3
)

// tb is what a case reports to: the subtest's *testing.T, or an attempt
// that may be made again.
type tb interface {
	Helper()
	Name() string
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Fatal(args ...any)
	Skip(args ...any)
}

// attempt is one run of a case whose failures wait to be reported until
// the run's lateness is known. Fatalf, Fatal and Skip end the run's
// goroutine, as they end a test's.
type attempt struct {
	name string
	late func() time.Duration // how late the run was; set by the run

	mu      sync.Mutex // the case's goroutines report concurrently
	errs    []string
	skipped string
}

func (a *attempt) Helper()                         {}
func (a *attempt) Name() string                    { return a.name }
func (a *attempt) Logf(format string, args ...any) {}

func (a *attempt) Errorf(format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs = append(a.errs, caller()+fmt.Sprintf(format, args...))
}

func (a *attempt) Fatalf(format string, args ...any) {
	a.Errorf(format, args...)
	runtime.Goexit()
}

func (a *attempt) Fatal(args ...any) {
	a.Errorf("%s", fmt.Sprint(args...))
	runtime.Goexit()
}

func (a *attempt) Skip(args ...any) {
	a.mu.Lock()
	a.skipped = fmt.Sprint(args...)
	a.mu.Unlock()
	runtime.Goexit()
}

// caller names the line of a case that reported, as a test's log does:
// the first frame outside this file and the subject's helpers.
func caller() string {
	for skip := 2; ; skip++ {
		_, file, line, ok := runtime.Caller(skip)
		if !ok {
			return ""
		}
		if base := filepath.Base(file); base != "attempt.go" && base != "storetest.go" {
			return fmt.Sprintf("%s:%d: ", base, line)
		}
	}
}

// runAttempts runs a case, each attempt on a goroutine of its own, until
// one passes, fails on time, or maxAttempts have run, and reports to t
// what the last one said.
func runAttempts(t tb, run func(a *attempt)) {
	t.Helper()
	for i := 1; ; i++ {
		a := &attempt{name: t.Name(), late: func() time.Duration { return 0 }}
		done := make(chan struct{})
		go func() {
			defer close(done)
			run(a)
		}()
		<-done
		late := a.late()
		switch {
		case a.skipped != "":
			t.Skip(a.skipped)
			return
		case len(a.errs) == 0:
			return
		case late > lateBound && i < maxAttempts:
			t.Logf("attempt %d ran %v late of the steps it planned, more than the %v its clauses allow a store on a clock of its own; made again on new tenants. It said: %s",
				i, late.Round(time.Millisecond), lateBound, strings.Join(a.errs, "; "))
			continue
		}
		for _, e := range a.errs {
			t.Errorf("%s", e)
		}
		if late > lateBound {
			t.Errorf("each of the %d attempts ran more than %v late of the steps it planned, the last by %v: too busy a machine to tell a store's failure from its own lateness",
				maxAttempts, lateBound, late.Round(time.Millisecond))
		}
		return
	}
}
