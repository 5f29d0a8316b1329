package ratelimit_test

import (
	"testing"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/gatewaykit/ratelimit/store"
	"github.com/gatewaykit/ratelimit/storetest"
)

// Both built-in stores pass the contract that any store passes.

func TestMemoryCounterIsAStore(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return ratelimit.NewMemoryCounter() })
}

func TestRedisCounterIsAStore(t *testing.T) {
	for _, c := range []struct {
		name  string
		store func(t *testing.T) store.Store
	}{
		{"single node", func(t *testing.T) store.Store { return ratelimit.NewRedisCounter(redistest.Client(t)) }},
		{"cluster", func(t *testing.T) store.Store { return ratelimit.NewRedisCounter(redistest.Cluster(t)) }},
		{"ring", func(t *testing.T) store.Store { return ratelimit.NewRedisCounter(redistest.Ring(t)) }},
	} {
		t.Run(c.name, func(t *testing.T) { storetest.Run(t, c.store) })
	}
}

// A limiter's store with Options.Leases is a Store in front of a Store,
// and passes the contract over each built-in one.
func TestLeaseStoreIsAStore(t *testing.T) {
	for _, c := range []struct {
		name  string
		store func(t *testing.T) store.Store
	}{
		{"memory", func(*testing.T) store.Store { return ratelimit.NewMemoryCounter() }},
		{"single node", func(t *testing.T) store.Store { return ratelimit.NewRedisCounter(redistest.Client(t)) }},
		{"cluster", func(t *testing.T) store.Store { return ratelimit.NewRedisCounter(redistest.Cluster(t)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) store.Store { return ratelimit.NewLeaseStore(c.store(t)) })
		})
	}
}
