// Package goroutines tells the goroutines a test started and left
// running, for the tests of every package that must start none or stop
// all it starts.
package goroutines

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// Now returns the stack of every goroutine now running, by its ID.
func Now() map[string]string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	m := map[string]string{}
	for _, stack := range strings.Split(string(buf), "\n\n") {
		id, _, _ := strings.Cut(strings.TrimPrefix(stack, "goroutine "), " ")
		m[id] = stack
	}
	return m
}

// NoneLeft fails t, and returns false, when a goroutine that was not in
// before, a reading of Now, is still running after a grace
// period for those on their way out. Goroutine IDs are never reused, so the
// goroutines that other tests leave winding down were in before and never
// count, whenever they end.
func NoneLeft(t testing.TB, before map[string]string) bool {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		var left []string
		for id, stack := range Now() {
			if _, ok := before[id]; !ok {
				left = append(left, stack)
			}
		}
		if len(left) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			t.Errorf("%d goroutines started and still running:\n\n%s", len(left), strings.Join(left, "\n\n"))
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
