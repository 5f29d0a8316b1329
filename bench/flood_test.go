package bench

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
)

const (
	// floodLimit is the flooding tenant's budget per window (a minute,
	// which no flood outlasts), floodFactor how many times it sends that.
	floodLimit  = 100
	floodFactor = 200
	floodSize   = floodFactor * floodLimit
)

// A floodRun is the contenders that flood with callers goroutines.
type floodRun struct {
	callers    int
	contenders []handlerContender
}

var floods = []floodRun{
	{redisCallers, []handlerContender{ours, oursSliding, oursNoCache, oursAutoPipe, fiberLimiter, ululeRedis, redisRate, rawMultiExec}},
	// One caller: nothing to share a round trip with, so without the
	// over-limit cache every request is a round trip of its own.
	{1, []handlerContender{ours, oursSliding, oursNoCache, oursAutoPipe, rawMultiExec}},
}

// BenchmarkFlood is one flood per op: one tenant, new in each op, sends
// floodSize requests (floodFactor × its limit of floodLimit) from callers
// goroutines at once, through the contender's handler on Redis (go-redis's
// default options). It reports the Redis commands per request the floods
// cost, from INFO stats total_commands_processed before and after them
// (less what the INFO calls themselves add), and how many requests of each
// flood were allowed. Redis counts the commands a Lua script or a
// MULTI/EXEC runs as well as the EVALSHA, MULTI and EXEC themselves.
func BenchmarkFlood(b *testing.B) {
	for _, run := range floods {
		for _, c := range run.contenders {
			b.Run(fmt.Sprintf("redis/callers=%d/%s", run.callers, c.name), func(b *testing.B) {
				rdb := benchRedis(b, "redis", optsDefault)
				admin := redisClient(b, optsDefault)
				h := newApp(c.new(b, rdb, floodLimit)).Handler()
				// What reading the figure adds to it: the reading before
				// the floods counts in the reading after them.
				infoCost := commandsProcessed(b, admin)
				infoCost = commandsProcessed(b, admin) - infoCost

				var allowed atomic.Int64
				before := commandsProcessed(b, admin)
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					flood(b, h, []byte("flood"+strconv.Itoa(i)), run.callers, &allowed)
				}
				b.StopTimer()
				cmds := commandsProcessed(b, admin) - before - infoCost
				requests := float64(b.N) * floodSize
				b.ReportMetric(float64(cmds)/requests, "cmds/req")
				b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/flood")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/requests, "ns/req")
				reportFailOpen(b)
			})
		}
	}
}

// flood sends floodSize requests for tenant through h from callers
// goroutines, and adds those answered 200 to allowed. Any answer but 200
// and 429 is an error.
func flood(b *testing.B, h fasthttp.RequestHandler, tenant []byte, callers int, allowed *atomic.Int64) {
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range callers {
		wg.Go(func() {
			var ctx fasthttp.RequestCtx
			ok := int64(0)
			for next.Add(1) <= floodSize {
				ctx.Response.Reset()
				ctx.Request.SetRequestURI("/")
				ctx.Request.Header.SetBytesV("X-Tenant", tenant)
				h(&ctx)
				switch code := ctx.Response.StatusCode(); code {
				case fiber.StatusOK:
					ok++
				case fiber.StatusTooManyRequests:
				default:
					b.Errorf("status %d, want 200 or 429: %s", code, ctx.Response.Body())
					return
				}
			}
			allowed.Add(ok)
		})
	}
	wg.Wait()
}

// commandsProcessed reads total_commands_processed from INFO stats.
func commandsProcessed(b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(b.Context(), "stats").Result()
	if err != nil {
		b.Fatalf("INFO stats: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "total_commands_processed:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatalf("INFO stats: total_commands_processed: %v", err)
			}
			return n
		}
	}
	b.Fatalf("INFO stats has no total_commands_processed:\n%s", info)
	return 0
}
