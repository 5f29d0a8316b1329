package main

import (
	"log"
	"net/http"
	"time"

	"github.com/gatewaykit/ratelimit"
)

var tenants = map[string]string{"key-acme": "acme", "key-globex": "globex"}

func main() {
	lim := ratelimit.NewLimiter(ratelimit.Options{Limit: 5, Window: time.Minute})
	limit := ratelimit.HTTPMiddleware(lim, ratelimit.HTTPConfig{LimitReached: ratelimit.ProblemDetails})
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello\n")) })
	authenticate := func(next http.Handler) http.Handler { // authentication
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if t, ok := tenants[r.Header.Get("X-API-Key")]; ok {
				r = r.WithContext(ratelimit.WithTenant(r.Context(), t))
			}
			next.ServeHTTP(w, r)
		})
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", authenticate(limit(hello))))
}
