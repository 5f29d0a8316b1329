package fixedstore_test

import (
	"testing"

	"github.com/gatewaykit/ratelimit/examples/fixedstore"
	"github.com/gatewaykit/ratelimit/store"
	"github.com/gatewaykit/ratelimit/storetest"
)

// The store passes the cases of the features it declares.
func TestStore(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return fixedstore.New() })
}
