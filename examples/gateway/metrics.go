package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gatewaykit/ratelimit"
)

// limiterCollector exposes a ratelimit.Metrics to Prometheus. It reads the
// counts when scraped, so requests pay only the limiter's atomic adds.
type limiterCollector struct {
	m         *ratelimit.Metrics
	decisions *prometheus.Desc
	breaker   *prometheus.Desc
}

func newLimiterCollector(m *ratelimit.Metrics) *limiterCollector {
	return &limiterCollector{
		m: m,
		decisions: prometheus.NewDesc("ratelimit_decisions_total",
			"Requests the rate limiter decided, by decision.", []string{"decision"}, nil),
		breaker: prometheus.NewDesc("ratelimit_breaker_state",
			"State of the limiter's circuit breaker: 0 closed, 1 open, 2 half-open.", nil, nil),
	}
}

func (c *limiterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.decisions
	ch <- c.breaker
}

func (c *limiterCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.m.Snapshot()
	for decision, n := range map[string]uint64{
		"allowed":          s.Allowed,
		"limited":          s.Limited,
		"failed_open":      s.FailedOpen,
		"failed_closed":    s.FailedClosed,
		"fallback_allowed": s.FallbackAllowed,
		"fallback_limited": s.FallbackLimited,
	} {
		ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(n), decision)
	}
	ch <- prometheus.MustNewConstMetric(c.breaker, prometheus.GaugeValue, float64(s.Breaker))
}
