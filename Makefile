# Checks and demos; CI runs `make lint` and `make test` from .ci/run.

STATICCHECK_VERSION = v0.8.2

.PHONY: test test-unit bench lint run

# Everything, the Redis integration tests included.
test:
	go test -race -count=1 ./...

# Without Redis: the integration tests skip under -short.
test-unit:
	go test -race -count=1 -short ./...

bench:
	go test -run '^$$' -bench . -benchmem ./...

lint:
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt -l: not formatted:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

run:
	go run ./examples/gateway
