package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/store"
)

// bare is a store that declares no feature: a MemoryCounter that fails
// every request beyond fixed windows at a cost of 1.
type bare struct{ *ratelimit.MemoryCounter }

func (bare) Attach(ratelimit.Request) (ratelimit.StoreInfo, error) {
	return ratelimit.StoreInfo{Local: true}, nil
}

func (b bare) Take(ctx context.Context, r ratelimit.Request) (ratelimit.Answer, error) {
	if r.Cost != 1 || r.Algorithm != ratelimit.FixedWindow || r.Quotas != nil || r.Delay != 0 {
		return ratelimit.Answer{}, fmt.Errorf("bare: %v at a cost of %d, %d quotas: a feature it does not declare", r.Algorithm, r.Cost, len(r.Quotas))
	}
	return b.MemoryCounter.Take(ctx, r)
}

func (bare) Give(context.Context, ratelimit.Request, store.Marks) error {
	return errors.New("bare: gives nothing back")
}
func (bare) Reset(context.Context, ratelimit.Request) error {
	return errors.New("bare: resets nothing")
}

// Run runs on a store that declares nothing only the cases that need
// nothing: the others would fail on it.
func TestRunSkipsWhatAStoreDoesNotDeclare(t *testing.T) {
	Run(t, func(*testing.T) ratelimit.Store { return bare{ratelimit.NewMemoryCounter()} })
}

// A store that declares nothing is tested for something real: beside
// Incr and Attach, some cases take in fixed windows at a cost of 1.
func TestSomeCasesNeedNothing(t *testing.T) {
	n := 0
	for _, c := range cases {
		if c.needs == 0 {
			n++
		}
	}
	if n < 4 {
		t.Errorf("%d cases need no feature; want Incr's, Attach's and two that take, at least", n)
	}
}
