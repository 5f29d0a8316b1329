package ratelimit

import (
	"path/filepath"
	"testing"
)

// docs/stores.md shows a whole store: examples/mapstore, word for word,
// so that what a reader copies compiles and passes storetest.
func TestStoresDocIsTheExample(t *testing.T) {
	doc := readFile(t, filepath.Join("docs", "stores.md"))
	path := filepath.Join("examples", "mapstore", "mapstore.go")
	if !hasGoBlock(doc, readFile(t, path)) {
		t.Errorf("docs/stores.md has no go block that is %s word for word", path)
	}
}
