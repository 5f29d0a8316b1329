// Package bench compares ratelimit with other Go rate limiters, side by
// side, as Fiber middleware and as bare counters, in memory and on Redis.
// Everything lives in its tests and benchmarks; run.sh runs them against a
// throwaway Redis. It is its own module so that the peers never enter the
// library's go.mod.
package bench
