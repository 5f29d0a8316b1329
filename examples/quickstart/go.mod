module github.com/gatewaykit/ratelimit/examples/quickstart

go 1.26.0

// The README's quick start, one program per middleware, and its Redis and
// metrics snippets, word for word (readme_test.go checks them). A module of
// its own, for Fiber v3 and Prometheus's client; it builds against the
// library and its Fiber v3 and Prometheus modules in this repository.
replace (
	github.com/gatewaykit/ratelimit => ../..
	github.com/gatewaykit/ratelimit/fiberv3 => ../../fiberv3
	github.com/gatewaykit/ratelimit/prometheus => ../../prometheus
	github.com/gatewaykit/ratelimit/ratelimitgrpc => ../../ratelimitgrpc
)

require (
	github.com/gatewaykit/ratelimit v0.0.0
	github.com/gatewaykit/ratelimit/fiberv3 v0.0.0-00010101000000-000000000000
	github.com/gatewaykit/ratelimit/prometheus v0.0.0-00010101000000-000000000000
	github.com/gatewaykit/ratelimit/ratelimitgrpc v0.0.0-00010101000000-000000000000
	github.com/gofiber/fiber/v2 v2.52.15
	github.com/gofiber/fiber/v3 v3.1.0
	github.com/prometheus/client_golang v1.25.0
	github.com/redis/go-redis/v9 v9.23.0
	google.golang.org/grpc v1.85.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/gofiber/schema v1.7.0 // indirect
	github.com/gofiber/utils/v2 v2.0.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/mattn/go-runewidth v0.0.16 // indirect
	github.com/molecule-man/go-brrr v1.3.1 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/philhofer/fwd v1.2.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/rivo/uniseg v0.2.0 // indirect
	github.com/tinylib/msgp v1.6.3 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasthttp v1.78.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
