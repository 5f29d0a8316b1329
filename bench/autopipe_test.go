package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/internal/redisstore"
	"github.com/gatewaykit/ratelimit/store"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
)

// oursAutoPipe is ours with go-redis's auto-pipelining (v9.22 and later,
// experimental) in place of RedisCounter's batcher: the same limiter, the
// same call of the same FUNCTION library for each request, but each
// request's call submitted on its own to the client's AsyncAutoPipeline,
// which packs the calls that concurrent callers submit into shared
// pipelines. Issue 44 asked to measure the two side by side and keep the
// faster; docs/benchmarks.md gives both, and why the batcher stays.
var oursAutoPipe = handlerContender{"ratelimit-autopipe", func(tb testing.TB, rdb redis.UniversalClient, limit int) fiber.Handler {
	return oursHandler(tb, ratelimit.Config{Counter: newAutoPipeStore(tb, rdb), Limit: limit, Window: window, Tenant: tenantHeader})
}}

// autoPipeStore is a store.Store of fixed windows at a cost of 1, decided
// by the take function of RedisCounter's library, one FCALL per request
// through an AutoPipeliner. A caller stops waiting at its request's
// Deadline (the limiter's StoreTimeout), as with RedisCounter; the
// pipeline itself runs on go-redis's own context, which no deadline ends.
type autoPipeStore struct {
	ap   *redis.AutoPipeliner
	take string // the library's take function
}

// newAutoPipeStore loads RedisCounter's library on each server of rdb, by
// requests of tenants whose keys fall on each through a RedisCounter, and
// returns a store that calls its take function through rdb's
// AsyncAutoPipeline.
func newAutoPipeStore(tb testing.TB, rdb redis.UniversalClient) *autoPipeStore {
	ctx := context.Background()
	if !hasFunctions(rdb) {
		tb.Skip("ratelimit-autopipe calls RedisCounter's FUNCTION library, which this server (Redis 6?) lacks: run it on Redis 7 or later, or Valkey")
	}
	lim := ratelimit.NewLimiter(ratelimit.Options{Counter: ratelimit.NewRedisCounter(rdb), Limit: 1, Window: time.Second, Name: "autopipe-load"})
	for i := range 64 {
		if d := lim.Take(ctx, "load"+strconv.Itoa(i)); d.By != ratelimit.ByCounter {
			tb.Fatalf("loading the library by a request: %+v", d)
		}
	}
	var mu sync.Mutex // the servers of a cluster answer at once
	takes := map[string]bool{}
	ok, err := redisstore.EachServer(ctx, rdb, func(ctx context.Context, c *redis.Client) error {
		libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "ratelimit_*"}).Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		found := false
		for _, l := range libs {
			for _, f := range l.Functions {
				if strings.HasPrefix(f.Name, "ratelimit_take_") {
					takes[f.Name], found = true, true
				}
			}
		}
		if !found {
			return fmt.Errorf("%s has no ratelimit library", c.Options().Addr)
		}
		return nil
	})
	if !ok {
		tb.Fatalf("ratelimit-autopipe runs on a client of a server, a cluster or a ring, not a %T", rdb)
	}
	if err != nil {
		tb.Fatalf("the library on each server: %v", err)
	}
	if len(takes) != 1 {
		tb.Fatalf("want one take function of one ratelimit library on every server: %v", takes)
	}
	s := &autoPipeStore{}
	for name := range takes {
		s.take = name
	}
	ap, _ := rdb.(interface {
		AsyncAutoPipeline() (*redis.AutoPipeliner, error)
	})
	if s.ap, err = ap.AsyncAutoPipeline(); err != nil {
		tb.Fatal(err)
	}
	return s
}

// hasFunctions reports whether rdb's server runs FUNCTION libraries.
func hasFunctions(rdb redis.UniversalClient) bool {
	return rdb.Do(context.Background(), "function", "list").Err() == nil
}

var errAutoPipeOnly = errors.New("autoPipeStore decides fixed windows at a cost of 1 only")

func (s *autoPipeStore) Attach(b *store.Budget, plans bool) (store.Info, error) {
	if b.Algorithm != store.FixedWindow || len(b.Quotas) > 0 || plans {
		return store.Info{}, errAutoPipeOnly
	}
	return store.Info{}, nil
}

// Take sends FCALL take 1 <key> f <limit, hex> <window ms>, whose answer
// is the milliseconds the window has left and the count after the
// decision, or -count-1 for a refusal (see internal/redisstore/lua).
func (s *autoPipeStore) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	ms := r.Window.Milliseconds()
	cmd := redis.NewSliceCmd(ctx, "fcall", s.take, 1, string(r.Key), "f", strconv.FormatInt(r.Limit, 16), ms)
	wctx := ctx
	if !r.Deadline.IsZero() {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(ctx, r.Deadline)
		defer cancel()
	}
	if err := s.ap.Submit(ctx, cmd).WaitContext(wctx); err != nil {
		return err
	}
	vals, err := cmd.Result()
	if err != nil {
		return err
	}
	if len(vals) != 2 {
		return fmt.Errorf("take answered %v", vals)
	}
	left, _ := vals[0].(int64)
	n, _ := vals[1].(int64)
	c := store.Count{N: n, Fits: n >= 0, Left: time.Duration(left) * time.Millisecond, Length: r.Window}
	if n < 0 {
		c.N = -n - 1
	}
	res.Allowed, res.Counts[0] = c.Fits, c
	return nil
}

func (s *autoPipeStore) Give(context.Context, *store.Request, store.Marks) error {
	return errAutoPipeOnly
}

func (s *autoPipeStore) Reset(context.Context, *store.Request) error { return errAutoPipeOnly }
