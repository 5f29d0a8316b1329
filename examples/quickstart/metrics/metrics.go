package main

import (
	"github.com/gatewaykit/ratelimit"
	ratelimitprom "github.com/gatewaykit/ratelimit/prometheus"
	"github.com/prometheus/client_golang/prometheus"
)

func exportMetrics(m *ratelimit.Metrics) { // served by promhttp.Handler()
	c := ratelimitprom.NewCollector()
	c.Add("global", m)
	prometheus.MustRegister(c)
}
