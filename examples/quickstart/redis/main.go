// Command redis is the README's Redis snippet (limiter.go, word for word
// but for its package clause) in a program: a net/http server limited on
// the Redis at 127.0.0.1:6379, which stops at start-up if that Redis is
// down or refuses it.
package main

import (
	"log"
	"log/slog"
	"net/http"

	"github.com/gatewaykit/ratelimit"
)

func main() {
	lim, err := newLimiter(slog.Default())
	if err != nil {
		log.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello\n")) })
	limit := ratelimit.HTTPMiddleware(lim, ratelimit.HTTPConfig{AnonymousByIP: true})
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", limit(hello)))
}
