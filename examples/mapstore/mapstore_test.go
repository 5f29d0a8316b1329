package mapstore_test

import (
	"testing"

	"github.com/gatewaykit/ratelimit/examples/mapstore"
	"github.com/gatewaykit/ratelimit/store"
	"github.com/gatewaykit/ratelimit/storetest"
)

// The store passes the contract that the built-in stores pass.
func TestStore(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return mapstore.New() })
}
