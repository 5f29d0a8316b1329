package ratelimit

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A hook added to the user's go-redis client (tracing, metrics) sees every
// command the limiter sends, whether it was added before NewRedisCounter or
// after, on a single node, a cluster and a ring, with go-redis's default
// options and with ContextTimeoutEnabled: the hook's count of each command
// is the servers' own (INFO commandstats).
func TestClientHooksSeeEveryCommand(t *testing.T) {
	skipIfShort(t)
	kinds := []struct {
		name   string
		client func(t *testing.T, contextTimeout bool) (redis.UniversalClient, []string)
	}{
		{"single node", func(t *testing.T, ct bool) (redis.UniversalClient, []string) {
			o := redisOptions(t)
			o.ContextTimeoutEnabled = ct
			rdb := redis.NewClient(o)
			t.Cleanup(func() { rdb.Close() })
			return rdb, []string{o.Addr}
		}},
		{"cluster", func(t *testing.T, ct bool) (redis.UniversalClient, []string) {
			addrs := clusterAddrs(t)
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: ct})
			t.Cleanup(func() { rdb.Close() })
			return rdb, addrs
		}},
		{"ring", func(t *testing.T, ct bool) (redis.UniversalClient, []string) {
			o := ringOptions(t)
			o.ContextTimeoutEnabled = ct
			rdb := redis.NewRing(o)
			t.Cleanup(func() { rdb.Close() })
			return rdb, slices.Compact(slices.Sorted(maps.Values(o.Addrs)))
		}},
	}
	for _, kind := range kinds {
		for _, ct := range []bool{false, true} {
			for _, after := range []bool{false, true} {
				name := kind.name + "/default options"
				if ct {
					name = kind.name + "/ContextTimeoutEnabled"
				}
				if after {
					name += "/hook added after NewRedisCounter"
				} else {
					name += "/hook added before NewRedisCounter"
				}
				t.Run(name, func(t *testing.T) {
					rdb, addrs := kind.client(t, ct)
					hook := &commandCounts{n: map[string]int{}}
					if !after {
						rdb.AddHook(hook)
					}
					counter := NewRedisCounter(rdb)
					if after {
						rdb.AddHook(hook)
					}
					before := serverCommandCounts(t, addrs)
					requests := useEveryKindOfCall(t, counter)
					got, server := hook.counts(), serverCommandCounts(t, addrs)
					for name := range server {
						server[name] -= before[name]
					}
					if calls := got["fcall"] + got["evalsha"] + got["eval"]; calls < requests {
						t.Errorf("the hook saw %d script calls for %d requests that each needed one: %v", calls, requests, got)
					}
					// commandstats also counts the commands a script calls:
					// only the calls a client sends are compared.
					for _, cmd := range []string{"fcall", "evalsha", "eval"} {
						// Redis 6.0 does not count the FCALL it knows no
						// such command for, which turns the counter to
						// scripts: one at most.
						if cmd == "fcall" && server[cmd] == 0 && got[cmd] == 1 {
							continue
						}
						if got[cmd] != server[cmd] {
							t.Errorf("%s: the hook saw %d, the servers ran %d (hook %v)", cmd, got[cmd], server[cmd], got)
						}
					}
				})
			}
		}
	}
}

// useEveryKindOfCall makes every kind of call a limiter sends, one at a
// time, and returns how many of them needed a round trip with a script.
func useEveryKindOfCall(t *testing.T, counter *RedisCounter) int {
	t.Helper()
	ctx := context.Background()
	tenant := uniqueTenant(t)
	requests := 0
	month := []Quota{{Name: "month", Limit: 100, Calendar: CalendarMonth}}
	for _, opts := range []Options{
		{Name: "fixed", Limit: 10, Window: time.Minute},
		{Name: "sliding", Limit: 10, Window: time.Minute, Algorithm: SlidingWindow},
		{Name: "quotas", Limit: 10, Window: time.Minute, Quotas: month},
		{Name: "inflight", Limit: 2, Window: time.Minute, Algorithm: InFlight},
	} {
		opts.Counter, opts.DisableOverLimitCache = counter, true
		opts.Logger = newLogRecorder().logger()
		lim := NewLimiter(opts)
		if err := lim.Ping(ctx); err != nil {
			t.Fatalf("%v: Ping: %v", opts.Algorithm, err)
		}
		d := lim.Take(ctx, tenant)
		if !d.Allowed || d.By != ByCounter {
			t.Fatalf("%v: %+v, want allowed by the counter", opts.Algorithm, d)
		}
		if err := lim.Release(ctx, d); err != nil {
			t.Fatalf("%v: Release: %v", opts.Algorithm, err)
		}
		if _, err := lim.Usage(ctx, tenant); err != nil {
			t.Fatalf("%v: Usage: %v", opts.Algorithm, err)
		}
		requests += 4 // Ping, Take, Release, Usage
		if err := lim.Reset(ctx, tenant); err != nil {
			t.Fatalf("%v: Reset: %v", opts.Algorithm, err)
		}
	}
	return requests
}

// commandCounts is a go-redis hook that counts the commands its client
// sends, by name, pipelined ones included.
type commandCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *commandCounts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *commandCounts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *commandCounts) add(cmd redis.Cmder) {
	c.mu.Lock()
	c.n[strings.ToLower(cmd.Name())]++
	c.mu.Unlock()
}

func (c *commandCounts) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// serverCommandCounts sums INFO commandstats's calls by command over the
// servers at addrs, through clients of its own.
func serverCommandCounts(t *testing.T, addrs []string) map[string]int {
	t.Helper()
	o := redisOptions(t)
	sum := map[string]int{}
	for _, addr := range addrs {
		admin := redis.NewClient(&redis.Options{Addr: addr, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig})
		info, err := admin.Info(context.Background(), "commandstats").Result()
		admin.Close()
		if err != nil {
			t.Fatalf("INFO commandstats on %s: %v", addr, err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			// cmdstat_evalsha:calls=12,usec=...
			name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
			if !ok {
				continue
			}
			calls, _, _ := strings.Cut(rest, ",")
			n, err := strconv.Atoi(calls)
			if err != nil {
				t.Fatalf("INFO commandstats on %s: %q", addr, line)
			}
			sum[name] += n
		}
	}
	return sum
}
