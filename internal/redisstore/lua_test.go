package redisstore

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/gatewaykit/ratelimit/internal/window"
	"github.com/gatewaykit/ratelimit/store"
)

// The Lua that mirrors the window package, run on a real server beside
// the Go it mirrors, on the same inputs.

// calendarKinds are the periods calendar.lua knows, as the Lua names
// them, and window.Period's of the same.
var calendarKinds = [...]struct {
	lua string
	c   store.Calendar
}{{"d", store.Day}, {"w", store.Week}, {"m", store.Month}, {"y", store.Year}}

// calendarDays runs calendar.lua's period for the days from first on, n
// of them, each at its first and its last millisecond: for each of those
// instants, the start and end in ms of each period of ARGV[3] on.
const calendarDays = `
local first, n, out = tonumber(ARGV[1]), tonumber(ARGV[2]), {}
for day = first, first + n - 1 do
  local t0 = day * 86400000
  for _, t in ipairs({t0, t0 + 86399999}) do
    for k = 3, #ARGV do
      local s, e = period(ARGV[k], t)
      out[#out+1], out[#out+2] = s, e
    end
  end
end
return out
`

// calendar.lua finds the same day, week, month and year as window.Period
// for every day from 1970 to 2100, at its first and its last millisecond.
func TestCalendarLuaIsGos(t *testing.T) {
	rdb := redistest.Client(t)
	ctx := context.Background()
	calendar, err := luaFiles.ReadFile("lua/calendar.lua")
	if err != nil {
		t.Fatal(err)
	}
	script := string(calendar) + calendarDays
	const msPerDay = 24 * 60 * 60 * 1000
	first := time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() / msPerDay
	end := time.Date(2101, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() / msPerDay
	args := []any{0, 0}
	for _, k := range calendarKinds {
		args = append(args, k.lua)
	}
	// Days per script call: a reply of 2000 × 16 integers keeps each call
	// short on the server, which serves no one else meanwhile.
	const chunk = 2000
	const per = 2 * len(calendarKinds) // values per instant
	days, mismatches := 0, 0
	for from := first; from < end; from += chunk {
		n := min(chunk, end-from)
		args[0], args[1] = from, n
		vals, err := rdb.Eval(ctx, script, nil, args...).Int64Slice()
		if err != nil {
			t.Fatalf("days %d to %d: %v", from, from+n-1, err)
		}
		if len(vals) != int(n)*2*per {
			t.Fatalf("days %d to %d: %d values, want %d", from, from+n-1, len(vals), int(n)*2*per)
		}
		for i := range n * 2 {
			ms := (from+i/2)*msPerDay + i%2*(msPerDay-1)
			now := time.UnixMilli(ms).UTC()
			for j, k := range calendarKinds {
				start, end := k.c.Period(now)
				got := vals[int(i)*per+2*j : int(i)*per+2*j+2]
				if got[0] != start.UnixMilli() || got[1] != end.UnixMilli() {
					mismatches++
					if mismatches <= 10 {
						t.Errorf("at %v: Lua says period %s is [%v, %v); Go says [%v, %v)",
							now, k.lua, utcMilli(got[0]), utcMilli(got[1]), start, end)
					}
				}
			}
		}
		days += int(n)
	}
	if mismatches > 0 {
		t.Errorf("%d of %d periods differ", mismatches, 2*days*len(calendarKinds))
	}
	// 1970 to 2100: 131 years, 32 of them leap (2000 is, 2100 is not).
	if want := 131*365 + 32; days != want {
		t.Errorf("compared %d days, want %d", days, want)
	}
}

// utcMilli is ms since 1970 as a time, for messages.
func utcMilli(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// windows.lua decides a sliding window as window.Slide.Fits does. Requests
// go through the engine to the real script, some of them at once, so
// that a script call decides several callers in turn; the previous
// window's key is set first, so that its count weighs in. Each answer
// carries what the script decided on (the previous count, the count, how
// far the window had run), and Go must decide the same on it: an allowed
// cost fitted before it was counted, and a refused one did not fit.
func TestSlidingLuaIsGos(t *testing.T) {
	rdb := redistest.Client(t)
	ctx := context.Background()
	s := New(rdb)
	var allowedWithPrev int
	for _, tt := range []struct {
		name   string
		limit  int64
		window time.Duration
		prev   int64   // set in the previous window's key
		costs  []int64 // each request's, in turn
	}{
		{"cost 1, a full previous window", 10, 10 * time.Second, 10, []int64{1}},
		{"costs of 1 to 4, the previous window half full", 10, 10 * time.Second, 5, []int64{1, 2, 3, 4}},
		{"nothing in the previous window", 10, 10 * time.Second, 0, []int64{1, 3}},
		{"a large limit, large costs", 1000, time.Minute, 900, []int64{7, 50, 100}},
		{"the previous window over the limit", 100, 30 * time.Second, 150, []int64{1, 10}},
		{"a cost of the whole limit", 8, 10 * time.Second, 3, []int64{8, 1}},
		{"a window of 1.5 s", 20, 1500 * time.Millisecond, 17, []int64{1, 2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := &store.Budget{Algorithm: store.SlidingWindow, Limit: tt.limit, Window: tt.window}
			lim := window.Main(b)
			var answers []slidingAnswer
			// A first request that lands in the next window sees the
			// seeded one as current, not as previous: try again on a new
			// key.
			for range 3 {
				key := "{" + uniqueKey(t, "sliding") + "}"
				if err := seedPrevious(ctx, rdb, key, tt.window, tt.prev); err != nil {
					t.Fatal(err)
				}
				answers = takeSliding(t, s, key, b, tt.costs, 4, 12)
				if len(answers) == 0 || answers[0].st.Prev == tt.prev {
					break
				}
			}
			if len(answers) == 0 {
				t.Fatal("no answers")
			}
			if answers[0].st.Prev != tt.prev {
				t.Errorf("the first request saw a previous count of %d, want the %d set", answers[0].st.Prev, tt.prev)
			}
			refused := 0
			for _, a := range answers {
				st := a.st
				if st.Length != tt.window || st.Left <= 0 || st.Left > tt.window {
					t.Fatalf("cost %d: %+v; want Length %v and Left in (0, %v]", a.cost, st, tt.window, tt.window)
				}
				before := lim.Slide(&st)
				if st.Fits {
					before.Cur -= a.cost
				} else {
					refused++
				}
				if fits := before.Fits(a.cost, tt.limit); fits != st.Fits {
					t.Errorf("cost %d on %+v (estimate %v): the script says fits %v, Go says %v",
						a.cost, before, before.Estimate(), st.Fits, fits)
				}
				if st.Fits && st.Prev > 0 && st.Left < st.Length {
					allowedWithPrev++
				}
			}
			if refused == 0 {
				t.Errorf("none of %d requests refused: the limit was never reached", len(answers))
			}
		})
	}
	if allowedWithPrev == 0 {
		t.Error("no request was allowed with a previous window weighing in")
	}
}

// seedPrevious sets the count of key's sliding window of width before the
// one that holds now on the server's clock, to prev; for 0, it sets
// nothing. The key is the script's: "<key>:<width in ms>:<window number>".
func seedPrevious(ctx context.Context, rdb *redis.Client, key string, width time.Duration, prev int64) error {
	if prev == 0 {
		return nil
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return err
	}
	ms := width.Milliseconds()
	index := now.UnixMilli() / ms
	return rdb.Set(ctx, fmt.Sprintf("%s:%d:%d", key, ms, index-1), prev, 3*width).Err()
}

// slidingAnswer is what the store answered of a request of cost.
type slidingAnswer struct {
	cost int64
	st   store.Count
}

// takeSliding has s decide rounds of requests of key in b, each round
// made of a request of each cost, callers of them at once: the answers,
// the first request's first.
func takeSliding(t *testing.T, s *Store, key string, b *store.Budget, costs []int64, callers, rounds int) []slidingAnswer {
	t.Helper()
	var (
		mu      sync.Mutex
		answers []slidingAnswer
	)
	take := func(cost int64) {
		now := time.Now()
		r := store.Request{Budget: b, Cost: cost, Now: now, Deadline: now.Add(5 * time.Second)}
		res := store.Result{Counts: make([]store.Count, 1)}
		if err := s.Take(context.Background(), key, &r, &res); err != nil {
			t.Errorf("take %d of %s: %v", cost, key, err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		answers = append(answers, slidingAnswer{cost, res.Counts[0]})
	}
	take(costs[0])
	for i := range rounds {
		var wg sync.WaitGroup
		for j := range callers {
			wg.Go(func() { take(costs[(i*callers+j)%len(costs)]) })
		}
		wg.Wait()
	}
	return answers
}

// scriptAt is the Lua as an EVAL script (evalOf) on a clock stopped at ms: its clock function,
// which reads the server's TIME, returns ms instead, so that a test can
// put a request at an exact instant.
func scriptAt(t *testing.T, ms int64) string {
	t.Helper()
	return scriptAtMicros(t, ms*1000)
}

// scriptAtMicros is scriptAt at us microseconds since 1970.
func scriptAtMicros(t *testing.T, us int64) string {
	t.Helper()
	const clock = "  local t = redis.call('TIME')\n" +
		"  nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])\n" +
		"  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	if strings.Count(luaText, clock) != 1 {
		t.Fatal("args.lua's clock function is not as this test knows it: mend scriptAtMicros")
	}
	stopped := "  nowus = " + strconv.FormatInt(us, 10) + "\n  return " + strconv.FormatInt(us/1000, 10) + "\n"
	// A text of its own, so a take of its own in a Redis 6 server's
	// globals (evalOf).
	return evalOf(strings.Replace(luaText, clock, stopped, 1))
}

// A quota's window ends at its end instant, as in memstore (a window
// ends when now >= its end) and window.Period (a period holds its start,
// not its end): a request at exactly the end of a quota's fixed window
// counts in a new window, and one at the first instant of a calendar
// period in the new period. The script runs on a stopped clock
// (scriptAt), one request of cost 1 per call.
func TestQuotaWindowEndsAtItsEnd(t *testing.T) {
	rdb := redistest.Client(t)
	ctx := context.Background()
	// 12:00:00 UTC on Sunday 7 January 2024; the week ends at midnight.
	noon := time.Date(2024, 1, 7, 12, 0, 0, 0, time.UTC)
	_, weekEnd := store.Week.Period(noon)
	for _, tt := range []struct {
		name  string
		quota store.Quota
		start time.Time // the first request's instant
		end   time.Time // the quota's window's or period's end
	}{
		{"a fixed window of a second", store.Quota{Name: "q", Limit: 1, Window: time.Second}, noon, noon.Add(time.Second)},
		{"a fixed window of an hour", store.Quota{Name: "q", Limit: 1, Window: time.Hour}, noon, noon.Add(time.Hour)},
		{"a week", store.Quota{Name: "q", Limit: 1, Calendar: store.Week}, weekEnd.Add(-time.Second), weekEnd},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := "{" + uniqueKey(t, "end") + "}"
			b := &store.Budget{Name: "default", Limit: 100, Window: 48 * time.Hour, Quotas: []store.Quota{tt.quota}}
			args := limitArgs("g", &store.Request{Budget: b, Cost: 1})
			// take returns the quota's count after a request at at, or
			// -count-1 for a refusal, and the ms the script says are left
			// of its window or period.
			take := func(at time.Time) (count, left int64) {
				t.Helper()
				vals, err := rdb.Eval(ctx, scriptAt(t, at.UnixMilli()), []string{key}, args...).Int64Slice()
				if err != nil || len(vals) != 6 {
					t.Fatalf("at %v: %v, %v; want 6 values", at, vals, err)
				}
				return vals[5], vals[2]
			}
			if n, left := take(tt.start); n != 1 || left != tt.end.Sub(tt.start).Milliseconds() {
				t.Fatalf("the first request: count %d, %d ms left; want 1, %d ms", n, left, tt.end.Sub(tt.start).Milliseconds())
			}
			if n, left := take(tt.end.Add(-time.Millisecond)); n != -2 || left != 1 {
				t.Errorf("a millisecond before the end: count %d, %d ms left; want refused (-2) with 1 ms left", n, left)
			}
			if n, _ := take(tt.end); n != 1 {
				t.Errorf("at the end instant: count %d; want 1, in a new window (-2: refused by the one that ended)", n)
			}
		})
	}
}

// bucketSteps are the costs, at instants in µs from a base, and the delays
// a caller may wait, that the bucket's Lua and Go meet on a bucket of 3 a
// second and a burst of 4.
var bucketSteps = []struct{ at, cost, delay int64 }{
	{0, 1, 0}, {0, 2, 0}, {0, 1, 0}, {0, 1, 0}, // the burst, then a refusal
	{100_000, 1, 0}, {333_334, 1, 0}, {400_000, 2, 0},
	{400_000, 2, 700_000}, {400_000, 1, 0}, // a reservation, then a refusal behind it
	{5_000_000, 4, 0}, {5_000_000, 5, 10_000_000}, {9_000_001, 1, 0},
}

// goBucketStep is what Go's arithmetic says of a cost at now (µs) on a
// bucket whose TAT is *tat, as the script answers it: the µs until the
// bucket is full, rounded up, or -that-1 for a refusal; and Take's own
// figures. A cost that fits moves *tat.
func goBucketStep(b window.BucketOf, tat *float64, now, cost, delay int64) (want int64, after float64, fits bool) {
	after, fits = b.Take(*tat-float64(now), cost, float64(delay))
	want = int64(math.Ceil(after))
	if fits {
		*tat = float64(now) + after
	} else {
		want = -want - 1
	}
	return want, after, fits
}

// The token bucket's Lua (kind B) is window.BucketOf's arithmetic: the
// same costs at the same instants, on a stopped clock, get the same
// decisions and the same time until the bucket is full, which the script
// rounds up to whole microseconds; a refused cost leaves the key as it
// was. The interval, a third of a second, is no whole number of
// microseconds.
func TestBucketLuaMatchesGo(t *testing.T) {
	rdb := redistest.Client(t)
	ctx := context.Background()
	l := window.Limit{Limit: 3, Window: time.Second, Kind: store.TokenBucket, Burst: 4}
	b := l.Bucket()
	key := uniqueKey(t, "bucket")
	const base = int64(1_780_000_000_000_000) // µs since 1970
	tat := 0.0
	for i, s := range bucketSteps {
		now := base + s.at
		a := argsOfBucket(bucketSpec{b.Burst, b.Interval, s.delay})
		vals, err := rdb.Eval(ctx, scriptAtMicros(t, now), []string{key}, "B", a.iv, a.most, a.px, "1", hexArg(s.cost)).Int64Slice()
		if err != nil || len(vals) != 2 {
			t.Fatalf("step %d: %v, %v; want 2 values", i, vals, err)
		}
		want, after, fits := goBucketStep(b, &tat, now, s.cost, s.delay)
		if vals[1] != want {
			t.Fatalf("step %d (cost %d at +%d µs, delay %d): the script says %d; Go says %d", i, s.cost, s.at, s.delay, vals[1], want)
		}
		if got, err := rdb.Get(ctx, key).Float64(); err != nil || got != tat {
			t.Fatalf("step %d: the key holds %v, %v; want the TAT %v exactly", i, got, err, tat)
		}
		// The key lives at least until the bucket is full again (the
		// server's own clock runs on: the key was written at its now).
		if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || fits && ttl < time.Duration(after)*time.Microsecond-50*time.Millisecond {
			t.Fatalf("step %d: PTTL %v, %v; want at least the %v µs until full", i, ttl, err, after)
		}
	}
}

// A tenant's token bucket beside a quota (kind G, its main kind b) is
// window.BucketOf's arithmetic too, the callers' delay included: the
// bucketSteps, with a quota that never refuses, get the same decisions
// and the same time until the bucket is full, and the hash keeps the same
// TAT. A bound without the delay would refuse the
// callers that may wait for their turn.
func TestBucketWithQuotasLuaMatchesGo(t *testing.T) {
	rdb := redistest.Client(t)
	ctx := context.Background()
	budget := &store.Budget{Name: "default", Algorithm: store.TokenBucket, Limit: 3, Window: time.Second, Burst: 4,
		Quotas: []store.Quota{{Name: "hour", Limit: 1000, Window: time.Hour}}}
	r := &store.Request{Budget: budget}
	l := window.Main(budget)
	b := l.Bucket()
	key := "{" + uniqueKey(t, "bucket") + "}"
	const base = int64(1_780_000_000_000_000) // µs since 1970
	tat := 0.0
	for i, s := range bucketSteps {
		now := base + s.at
		args := append([]any{"Q", "1"}, argsOf(r).args...)
		args = append(args, "G", "1", hexArg(l.Burst), ivArg(b.Interval), s.delay, "1", hexArg(s.cost))
		vals, err := rdb.Eval(ctx, scriptAtMicros(t, now), []string{key}, args...).Int64Slice()
		if err != nil || len(vals) != 6 {
			t.Fatalf("step %d: %v, %v; want 6 values", i, vals, err)
		}
		want, _, _ := goBucketStep(b, &tat, now, s.cost, s.delay)
		if vals[4] != want {
			t.Fatalf("step %d (cost %d at +%d µs, delay %d): the script says %d; Go says %d", i, s.cost, s.at, s.delay, vals[4], want)
		}
		if got, err := rdb.HGet(ctx, key, l.Name).Float64(); err != nil || got != tat {
			t.Fatalf("step %d: the hash holds %v, %v; want the TAT %v exactly", i, got, err, tat)
		}
	}
}
