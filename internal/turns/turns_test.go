package turns

import (
	"testing"
	"time"
)

// Turns reserved and not started are taken over once; a turn that
// started before is not; one that starts after the take-over changes
// nothing; an entry ends with its last turn.
func TestTakeOver(t *testing.T) {
	key := []byte("rl:acme")
	tb := New(10)
	g1 := tb.Reserve(key, 2, 0, 100*time.Millisecond)
	tb.Reserve(key, 1, 0, 200*time.Millisecond)
	g3 := tb.Reserve(key, 3, 0, 300*time.Millisecond)
	tb.Started(key, 2, g1, 100*time.Millisecond)
	if n := tb.TakeOver(key, 150*time.Millisecond); n != 4 {
		t.Fatalf("taken over at 150ms: %d units; want 4, the two turns to come", n)
	}
	tb.Started(key, 3, g3, 300*time.Millisecond) // taken over already
	if n := tb.TakeOver(key, 160*time.Millisecond); n != 0 {
		t.Errorf("taken over again: %d units; want none", n)
	}
	g := tb.Reserve(key, 5, 200*time.Millisecond, 400*time.Millisecond)
	if n := tb.TakeOver(key, 400*time.Millisecond); n != 0 {
		t.Errorf("taken over at the last turn's start: %d units; want none, the entry ended", n)
	}
	tb.Started(key, 5, g, 400*time.Millisecond) // ended: nothing to change
	if n := tb.TakeOver(key, 410*time.Millisecond); n != 0 {
		t.Errorf("after the end: %d units; want none", n)
	}
}
