# Checks and demos; CI runs `make lint`, `make test`, `make test-servers`
# and a short `make fuzz` from .ci/run.
#
# Every target runs with GOWORK=off: each module is checked on its own
# go.mod, as its users build it, whatever go.work a developer keeps.

STATICCHECK_VERSION = v0.8.2
FUZZ_TARGETS = FuzzTenantKey FuzzHeaders
FUZZTIME ?= 300000x

# The nested modules, each with a go.mod of its own, and the examples:
# make test runs the first's tests and builds and vets the second, so that
# neither rots unseen. examples/gateway is part of the library's module
# (lint checks it there); the other examples, its OpenTelemetry variant
# (examples/gateway/otel) included, are modules of their own.
MODULES = fiberv3 prometheus ratelimitgrpc ratelimitotel envoyrls
EXAMPLE_MODULES = examples/fiberv3 examples/nethttp examples/quickstart examples/gateway/otel
EXAMPLES = examples/gateway examples/outbound $(EXAMPLE_MODULES)

export GOWORK = off

# Where scripts/redis-servers.sh keeps the servers it fetches (gitignored).
REDIS_SERVERS_DIR ?= .cache/redis-servers
servers_dir = $(abspath $(REDIS_SERVERS_DIR))
# The servers `make test-servers` runs the tests on.
TEST_SERVERS = redis6 redis7 redis8 valkey8
# REDIS_TESTS=optional lets `make test` run without a server, skipping the
# tests that need one, as plain `go test` does.
REDIS_TESTS ?= required

.PHONY: test test-unit test-examples test-rules test-servers fuzz bench bench-peers bench-compare lint vuln run

# with_redis_server runs its argument with a redis-server on PATH: the one
# already there, or else Redis 7, fetched into REDIS_SERVERS_DIR the first
# time. TEST_REDIS_URL does not replace it: the chaos tests start and kill
# servers of their own.
define with_redis_server
@if ! command -v redis-server >/dev/null 2>&1; then \
	if ! ./scripts/redis-servers.sh "$(servers_dir)" redis7; then \
		echo "make: no redis-server on PATH, and fetching one failed (see above)." >&2; \
		echo "Install redis-server (apt-get install redis-server on Debian) or put one on PATH;" >&2; \
		echo "TEST_REDIS_URL=redis://host:port/0 also points the single-node tests at a server of yours." >&2; \
		echo "To run without Redis: make test-unit, or make test REDIS_TESTS=optional (the Redis tests skip)." >&2; \
		exit 1; \
	fi; \
	PATH="$(servers_dir)/redis7/bin:$$PATH"; \
fi; \
echo "redis-server: $$(command -v redis-server): $$(redis-server --version)"; \
$(1)
endef

# Everything, the Redis integration and chaos tests included. They fail
# rather than skip when they find no server (RATELIMIT_REQUIRE_REDIS), unless
# REDIS_TESTS=optional.
# Each module's tests run even after another's fail (scripts/test-modules.sh),
# and the end of the output lists every failure.
test: test-examples test-rules
ifeq ($(REDIS_TESTS),optional)
	MODULES="$(MODULES)" ./scripts/test-modules.sh -race -count=1
else
	$(call with_redis_server,export RATELIMIT_REQUIRE_REDIS=1; MODULES="$(MODULES)" ./scripts/test-modules.sh -race -count=1)
endif

# Without Redis: the integration tests skip under -short.
test-unit: test-examples
	MODULES="$(MODULES)" ./scripts/test-modules.sh -race -count=1 -short

# Every example module builds and passes go vet.
test-examples:
	@for e in $(EXAMPLES); do \
		echo "test-examples: $$e"; (cd $$e && go build -o /dev/null ./... && go vet ./...) || exit 1; \
	done

# The Prometheus rules load and pass their tests with promtool: PROMTOOL
# if it is on PATH, or else Debian 12's, which scripts/promtool.sh fetches
# into PROMTOOL_DIR the first time, as the Redis servers are fetched.
# PROMTOOL=skip leaves the rules untested.
PROMTOOL ?= promtool
PROMTOOL_DIR ?= .cache/promtool
promtool_dir = $(abspath $(PROMTOOL_DIR))
test-rules:
ifeq ($(PROMTOOL),skip)
	@echo "test-rules: skipped (PROMTOOL=skip)"
else
	@promtool=$$(command -v "$(PROMTOOL)") || { \
		[ "$(PROMTOOL)" = promtool ] || { echo "make: PROMTOOL=$(PROMTOOL) is not a command" >&2; exit 1; }; \
		./scripts/promtool.sh "$(promtool_dir)" || { \
			echo "make: no promtool on PATH, and fetching one failed (see above)." >&2; \
			echo "Install Debian's prometheus package or put a promtool on PATH;" >&2; \
			echo "or run make test PROMTOOL=skip to leave the Prometheus rules untested." >&2; \
			exit 1; \
		}; \
		promtool="$(promtool_dir)/bin/promtool"; \
	}; \
	echo "test-rules: $$promtool: $$("$$promtool" --version 2>&1 | head -n 1)"; \
	"$$promtool" check rules prometheus/rules.yml && "$$promtool" test rules prometheus/rules_test.yml
endif

# The library's tests (unit, Redis, cluster, chaos) and those of the
# modules that run on Redis (Fiber v3, gRPC, the Envoy service) once on each of TEST_SERVERS, fetched into REDIS_SERVERS_DIR,
# each first on PATH in its turn. TEST_REDIS_URL and
# TEST_REDIS_CLUSTER_ADDRS are ignored here: every run starts its own
# servers. Fails if any run fails, after running all, each run listing its
# failures.
test-servers:
	./scripts/redis-servers.sh "$(servers_dir)" $(TEST_SERVERS)
	@failed=; \
	for name in $(TEST_SERVERS); do \
		bin="$(servers_dir)/$$name/bin"; \
		echo "test-servers: $$name: $$("$$bin/redis-server" --version)"; \
		PATH="$$bin:$$PATH" RATELIMIT_REQUIRE_REDIS=1 env -u TEST_REDIS_URL -u TEST_REDIS_CLUSTER_ADDRS \
			MODULES="fiberv3 ratelimitgrpc envoyrls" ./scripts/test-modules.sh -race -count=1 || failed="$$failed $$name"; \
	done; \
	if [ -n "$$failed" ]; then echo "test-servers: failed on$$failed" >&2; exit 1; fi; \
	echo "test-servers: passed on $(TEST_SERVERS)"

# Each fuzz target for FUZZTIME: a count of inputs (300000x, some 30 s here)
# or a time (make fuzz FUZZTIME=5m). A count is the default because Go 1.26's
# fuzzer can fail a timed run at its very end with "context deadline
# exceeded" and no failing input (Go issue 75804, fixed in Go 1.27). The
# seed corpus is in testdata/fuzz and also runs in every `make test`.
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
	$(call with_redis_server,./bench/run.sh)

# Two commits of the library, alternated round by round (bench/compare.sh):
# make bench-compare OLD=<commit> [NEW=<commit>].
bench-compare:
	@[ -n "$(OLD)" ] || { echo "make bench-compare: set OLD=<commit>" >&2; exit 2; }
	$(call with_redis_server,./bench/compare.sh $(OLD) $(NEW))

lint: vuln
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt -l: not formatted:"; echo "$$unformatted"; exit 1; fi
	@for dir in . $(MODULES) $(EXAMPLE_MODULES) bench; do \
		echo "lint: go vet in $$dir"; (cd $$dir && go vet ./...) || exit 1; \
	done
	@for dir in . $(MODULES) $(EXAMPLE_MODULES); do \
		echo "lint: staticcheck in $$dir"; \
		(cd $$dir && go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...) || exit 1; \
	done

# govulncheck on the library, its modules and the examples; fails
# on a called vulnerability in a required module (see .ci/vulncheck.sh).
vuln:
	./.ci/vulncheck.sh . $(MODULES) $(EXAMPLE_MODULES)

run:
	go run ./examples/gateway
