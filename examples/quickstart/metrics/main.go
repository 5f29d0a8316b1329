// Command metrics is the README's metrics snippet (metrics.go, word for
// word but for its package clause) in a program: a net/http server whose
// limiter's decisions Prometheus scrapes from /metrics.
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/gatewaykit/ratelimit"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	m := new(ratelimit.Metrics)
	lim := ratelimit.NewLimiter(ratelimit.Options{Limit: 5, Window: time.Minute, Metrics: m})
	exportMetrics(m)
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello\n")) })
	http.Handle("/", ratelimit.HTTPMiddleware(lim, ratelimit.HTTPConfig{AnonymousByIP: true})(hello))
	http.Handle("/metrics", promhttp.Handler())
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", nil))
}
