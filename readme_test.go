package ratelimit

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README's quick start is the programs in examples/quickstart, which
// make test builds and vets: word for word, so that what a newcomer copies
// compiles.
func TestREADMEQuickStartIsTheExamples(t *testing.T) {
	readme := readFile(t, "README.md")
	for _, door := range []string{"fiberv2", "nethttp", "grpc"} {
		path := filepath.Join("examples", "quickstart", door, "main.go")
		if !hasGoBlock(readme, readFile(t, path)) {
			t.Errorf("README.md has no go block that is %s word for word", path)
		}
	}
}

// The README's Redis and metrics snippets are files of programs in
// examples/quickstart too, word for word but for their package clause, so
// that they compile as pasted, imports included.
func TestREADMESnippetsAreExamples(t *testing.T) {
	readme := readFile(t, "README.md")
	for _, file := range []string{"redis/limiter.go", "metrics/metrics.go"} {
		path := filepath.Join("examples", "quickstart", file)
		body, ok := strings.CutPrefix(readFile(t, path), "package main\n\n")
		if !ok {
			t.Fatalf("%s does not start with its package clause, package main", path)
		}
		if !hasGoBlock(readme, body) {
			t.Errorf("README.md has no go block that is %s word for word, but for its package clause", path)
		}
	}
}

// The README stays short (depth goes to docs/), and its links to files of
// the repository lead somewhere. 10,000 characters until the gRPC quick
// start, a program of its own (Fiber v3's went to a link, the demo on
// three replicas to docs/redis.md): 10,700 since.
func TestREADMEIsShortAndItsLinksResolve(t *testing.T) {
	readme := readFile(t, "README.md")
	if n := len(readme); n > 10700 {
		t.Errorf("README.md has %d characters; keep it to 10,700 and move depth to docs/", n)
	}
	links := regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`).FindAllStringSubmatch(readme, -1)
	if len(links) == 0 {
		t.Fatal("found no relative link in README.md")
	}
	for _, l := range links {
		if _, err := os.Stat(l[1]); err != nil {
			t.Errorf("README.md links to %s: %v", l[1], err)
		}
	}
}

// hasGoBlock says whether readme has a go code block that is src.
func hasGoBlock(readme, src string) bool {
	return strings.Contains(readme, "```go\n"+src+"```\n")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
