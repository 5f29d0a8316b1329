package ratelimitotel_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/ratelimitotel"
)

// A limiter's decisions, read by the SDK's ManualReader. A service would
// give its MeterProvider a periodic reader and an OTLP exporter instead,
// and could leave WithMeterProvider out to use the global one.
func Example() {
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	instruments, err := ratelimitotel.New(ratelimitotel.WithMeterProvider(provider))
	if err != nil {
		log.Fatal(err)
	}
	defer instruments.Close()

	m := new(ratelimit.Metrics)
	instruments.Add("global", m)
	lim := ratelimit.NewLimiter(ratelimit.Options{Limit: 2, Window: time.Minute, Metrics: m})
	for range 3 {
		lim.Take(context.Background(), "acme")
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, inst := range sm.Metrics {
			sum, ok := inst.Data.(metricdata.Sum[int64])
			if inst.Name != "ratelimit.decisions" || !ok {
				continue
			}
			for _, p := range sum.DataPoints {
				if p.Value == 0 {
					continue // every pair of outcome and decider is there, zeros included
				}
				lim, _ := p.Attributes.Value("ratelimit.limiter")
				outcome, _ := p.Attributes.Value("ratelimit.outcome")
				decider, _ := p.Attributes.Value("ratelimit.decider")
				lines = append(lines, fmt.Sprintf("%s %s: %s by %s: %d %s", sm.Scope.Name, lim.AsString(),
					outcome.AsString(), decider.AsString(), p.Value, inst.Unit))
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// github.com/gatewaykit/ratelimit/ratelimitotel global: allowed by counter: 2 {decision}
	// github.com/gatewaykit/ratelimit/ratelimitotel global: limited by counter: 1 {decision}
}
