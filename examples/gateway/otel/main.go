// Command otel is examples/gateway, the same gateway with the same routes,
// limits, API keys and settings, whose limiters' metrics are exported
// with OpenTelemetry (github.com/gatewaykit/ratelimit/ratelimitotel) and
// printed to standard output as JSON, one line an export, by the SDK's
// stdout exporter: every 10 s, and once more when it stops.
//
//	cd examples/gateway/otel && go run .
//	OTEL_METRIC_EXPORT_INTERVAL=2000 go run . # every 2 s
//
// Each export holds the instruments that the ratelimitotel package doc
// lists, one data point per limiter (global, expensive, tokens) and
// attribute values, and the evictions of the in-memory counter. A real
// gateway would give the MeterProvider an OTLP exporter instead, and set
// it as the global one (otel.SetMeterProvider) for ratelimitotel.New to
// find it.
package main

import (
	"context"
	"log"
	"os"
	"time"

	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/examples/internal/demo"
	"github.com/gatewaykit/ratelimit/examples/internal/demo/gateway"
	"github.com/gatewaykit/ratelimit/ratelimitotel"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("gateway: ")
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	s, err := demo.FromEnv("127.0.0.1:3000")
	if err != nil {
		return err
	}
	logger := demo.Logger()
	store, err := demo.NewStore(s, logger)
	if err != nil {
		return err
	}
	defer store.Close()

	provider, err := newMeterProvider()
	if err != nil {
		return err
	}
	instruments, err := ratelimitotel.New(ratelimitotel.WithMeterProvider(provider))
	if err != nil {
		return err
	}
	defer func() {
		// Shutdown exports once more, so that the last figures are
		// printed, before Close stops reading them.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := provider.Shutdown(ctx); err != nil {
			log.Print(err)
		}
		instruments.Close()
	}()
	// The in-memory counter (or, with Redis, the fallback's) reports the
	// windows it evicted to stay within its bound.
	if m, ok := store.Counter.(*ratelimit.MemoryCounter); ok {
		instruments.AddMemoryCounter("counter", m)
	}
	if m, ok := store.Fallback.(*ratelimit.MemoryCounter); ok {
		instruments.AddMemoryCounter("fallback", m)
	}

	app, err := gateway.New(s, store, logger, func(limiter string) *ratelimit.Metrics {
		m := new(ratelimit.Metrics)
		instruments.Add(limiter, m)
		return m
	})
	if err != nil {
		return err
	}
	return gateway.Serve("gateway (Fiber v2, OpenTelemetry metrics on standard output)", s, store, app)
}

// newMeterProvider returns a MeterProvider that prints its metrics to
// standard output as JSON, every 10 s unless OTEL_METRIC_EXPORT_INTERVAL
// (milliseconds, which the SDK reads) says otherwise.
func newMeterProvider() (*sdkmetric.MeterProvider, error) {
	exporter, err := stdoutmetric.New()
	if err != nil {
		return nil, err
	}
	var opts []sdkmetric.PeriodicReaderOption
	if os.Getenv("OTEL_METRIC_EXPORT_INTERVAL") == "" {
		opts = append(opts, sdkmetric.WithInterval(10*time.Second))
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exporter, opts...))), nil
}
