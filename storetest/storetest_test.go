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

func (bare) Attach(*store.Budget, bool) (store.Info, error) {
	return store.Info{Local: true}, nil
}

func (b bare) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	if r.Cost != 1 || r.Algorithm != store.FixedWindow || r.Quotas != nil || r.Delay != 0 {
		return fmt.Errorf("bare: %v at a cost of %d, %d quotas: a feature it does not declare", r.Algorithm, r.Cost, len(r.Quotas))
	}
	return b.MemoryCounter.Take(ctx, r, res)
}

func (bare) Give(context.Context, *store.Request, store.Marks) error {
	return errors.New("bare: gives nothing back")
}
func (bare) Reset(context.Context, *store.Request) error {
	return errors.New("bare: resets nothing")
}

// Run runs on a store that declares nothing only the cases that need
// nothing: the others would fail on it.
func TestRunSkipsWhatAStoreDoesNotDeclare(t *testing.T) {
	Run(t, func(*testing.T) store.Store { return bare{ratelimit.NewMemoryCounter()} })
}

// A store that declares nothing is tested for something real: beside
// Attach, some cases take in fixed windows at a cost of 1.
func TestSomeCasesNeedNothing(t *testing.T) {
	n := 0
	for _, c := range cases {
		if c.needs == 0 {
			n++
		}
	}
	if n < 4 {
		t.Errorf("%d cases need no feature; want Attach's and three that take, at least", n)
	}
}
