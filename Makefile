# Checks and demos; CI runs `make lint`, `make test` and a short `make fuzz`
# from .ci/run.
#
# The library's targets run with GOWORK=off: they check the library on its
# own go.mod, as its users build it. go.work exists only so that
# `go run ./examples/gateway` works from the root.

STATICCHECK_VERSION = v0.8.2
FUZZ_TARGETS = FuzzTenantKey FuzzHeaders
FUZZTIME ?= 30s

export GOWORK = off

.PHONY: test test-unit fuzz bench bench-peers lint vuln run

# Everything, the Redis integration and chaos tests included.
test:
	go test -race -count=1 ./...

# Without Redis: the integration tests skip under -short.
test-unit:
	go test -race -count=1 -short ./...

# Each fuzz target for FUZZTIME (make fuzz FUZZTIME=5m). The seed corpus is
# in testdata/fuzz and also runs in every `make test`.
fuzz:
	@for target in $(FUZZ_TARGETS); do \
		echo "fuzz: $$target for $(FUZZTIME)"; \
		go test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) . || exit 1; \
	done

bench:
	go test -run '^$$' -bench . -benchmem ./...

# The side-by-side comparison with the peers (bench/, its own module),
# against a throwaway redis-server. See docs/benchmarks.md.
bench-peers:
	./bench/run.sh

lint: vuln
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt -l: not formatted:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	cd examples/gateway && go vet ./...
	cd bench && go vet ./...
	go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd examples/gateway && go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# govulncheck on the library and the example; fails on a called
# vulnerability in a required module (see .ci/vulncheck.sh).
vuln:
	./.ci/vulncheck.sh . examples/gateway

run:
	GOWORK= go run ./examples/gateway
