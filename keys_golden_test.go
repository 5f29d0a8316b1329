package ratelimit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// During a rolling deploy, replicas of two versions count into one budget:
// every key and hash field a limiter writes on Redis must stay what it was.
// TestRedisKeysGolden drives limiters of every algorithm, plan, quota,
// calendar and in-flight case through the public API on a server of its
// own and compares what Redis holds afterwards, key by key and field by
// field, with testdata/keys.golden. Run it with -update-keys to write the
// file anew, which a change of the keys' format must never need.

var updateKeys = flag.Bool("update-keys", false, "write testdata/keys.golden from this run")

// goldenCase is one limiter and what it is asked.
type goldenCase struct {
	name string
	opts Options
	run  func(ctx context.Context, t *testing.T, lim *Limiter)
}

func goldenCases() []goldenCase {
	take := func(tenants ...string) func(context.Context, *testing.T, *Limiter) {
		return func(ctx context.Context, t *testing.T, lim *Limiter) {
			for _, id := range tenants {
				if d := lim.Take(ctx, id); d.By != ByCounter {
					t.Fatalf("Take(%q) decided by %v: %v", id, d.By, d.Err)
				}
			}
		}
	}
	quotas := []Quota{
		{Name: "minute", Limit: 50, Window: time.Minute},
		{Name: "day", Limit: 1000, Calendar: CalendarDay},
		{Name: "month", Limit: 100000, Calendar: CalendarMonth},
	}
	weekYear := []Quota{
		{Name: "week", Limit: 500, Calendar: CalendarWeek},
		{Name: "year", Limit: 100000, Calendar: CalendarYear},
	}
	plans := func(tenant string) Plan {
		switch tenant {
		case "gold":
			return Plan{Limit: 100, Window: 2 * time.Minute}
		case "monthly":
			return Plan{Quotas: []Quota{{Name: "month", Limit: 5, Calendar: CalendarMonth}}}
		}
		return Plan{}
	}
	return []goldenCase{
		{"fixed", Options{Limit: 10, Window: time.Minute},
			take("acme", "acme", "", "unknown", "a{b}%c#d é", strings.Repeat("long", 40))},
		{"fixed-named", Options{Name: "api", Limit: 10, Window: time.Minute}, take("acme", "")},
		{"fixed-cost", Options{Limit: 10, Window: time.Minute}, func(ctx context.Context, t *testing.T, lim *Limiter) {
			lim.TakeN(ctx, "acme", 3)
			lim.TakeN(ctx, "acme", 20) // never fits: asks nothing
			lim.TakeN(ctx, "beta", 10)
			lim.TakeN(ctx, "beta", 1) // refused: spends nothing
		}},
		{"fixed-by-address", Options{Limit: 10, Window: time.Minute}, func(ctx context.Context, t *testing.T, lim *Limiter) {
			lim.TakeAddr(ctx, netip.MustParseAddr("192.0.2.7"))
			lim.TakeAddr(ctx, netip.MustParseAddr("::ffff:192.0.2.8"))
			lim.TakeAddr(ctx, netip.MustParseAddr("2001:db8:1:2:3:4:5:6"))
		}},
		{"fixed-release", Options{Limit: 10, Window: time.Minute}, func(ctx context.Context, t *testing.T, lim *Limiter) {
			lim.Take(ctx, "kept")
			d := lim.Take(ctx, "kept")
			if err := lim.Release(ctx, d); err != nil {
				t.Fatal(err)
			}
			if err := lim.Release(ctx, lim.Take(ctx, "gone")); err != nil { // its window's count falls to 0
				t.Fatal(err)
			}
		}},
		{"fixed-plans", Options{Limit: 10, Window: time.Minute, PlanFor: plans},
			take("gold", "gold", "monthly", "plain")},
		{"sliding", Options{Limit: 10, Window: time.Minute, Algorithm: SlidingWindow},
			take("acme", "acme", "")},
		{"sliding-named-plans", Options{Name: "api", Limit: 10, Window: time.Minute, Algorithm: SlidingWindow, PlanFor: plans},
			take("gold", "plain", "monthly")},
		{"sliding-release", Options{Limit: 10, Window: time.Minute, Algorithm: SlidingWindow}, func(ctx context.Context, t *testing.T, lim *Limiter) {
			lim.TakeN(ctx, "acme", 4)
			if err := lim.Release(ctx, lim.TakeN(ctx, "acme", 2)); err != nil {
				t.Fatal(err)
			}
		}},
		{"quotas-fixed", Options{Limit: 10, Window: time.Minute, Quotas: quotas}, func(ctx context.Context, t *testing.T, lim *Limiter) {
			take("acme", "acme", "")(ctx, t, lim)
			lim.TakeN(ctx, "beta", 4)
			if err := lim.Release(ctx, lim.TakeN(ctx, "beta", 2)); err != nil {
				t.Fatal(err)
			}
		}},
		{"quotas-sliding", Options{Name: "api", Limit: 10, Window: time.Minute, Algorithm: SlidingWindow, Quotas: quotas},
			take("acme", "acme")},
		{"quotas-reset", Options{Limit: 10, Window: time.Minute, Quotas: quotas}, func(ctx context.Context, t *testing.T, lim *Limiter) {
			take("acme", "beta")(ctx, t, lim)
			if err := lim.Reset(ctx, "acme"); err != nil {
				t.Fatal(err)
			}
		}},
		{"quotas-week-year", Options{Limit: 10, Window: time.Minute, Quotas: weekYear}, func(ctx context.Context, t *testing.T, lim *Limiter) {
			take("acme", "acme")(ctx, t, lim)
			lim.TakeN(ctx, "beta", 4)
			if err := lim.Release(ctx, lim.TakeN(ctx, "beta", 2)); err != nil {
				t.Fatal(err)
			}
		}},
		{"quotas-week-year-sliding", Options{Name: "api", Limit: 10, Window: time.Minute, Algorithm: SlidingWindow, Quotas: weekYear},
			take("acme", "acme")},
		{"in-flight", Options{Limit: 5, Window: time.Minute, Algorithm: InFlight}, func(ctx context.Context, t *testing.T, lim *Limiter) {
			lim.Take(ctx, "acme")
			lim.TakeN(ctx, "acme", 3)
			if err := lim.Release(ctx, lim.Take(ctx, "beta")); err != nil {
				t.Fatal(err)
			}
		}},
		{"ping-fixed", Options{Limit: 10, Window: time.Minute}, ping},
		{"ping-sliding-named", Options{Name: "api", Limit: 10, Window: time.Minute, Algorithm: SlidingWindow}, ping},
		{"ping-quotas", Options{Limit: 10, Window: time.Minute, Quotas: quotas}, ping},
		{"ping-in-flight", Options{Limit: 10, Window: time.Minute, Algorithm: InFlight}, ping},
	}
}

func ping(ctx context.Context, t *testing.T, lim *Limiter) {
	if err := lim.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRedisKeysGolden(t *testing.T) {
	skipIfShort(t)
	if !haveRedisServer() {
		skipWithoutServer(t, "redis-server is not on PATH: "+howToRunRedisTests)
	}
	srv, err := redistest.Start(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()

	var got strings.Builder
	sections := map[string][]string{}
	fuzzyCase := map[string]bool{}
	for _, c := range goldenCases() {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		opts := c.opts
		opts.Counter = NewRedisCounter(rdb)
		opts.DisableOverLimitCache = true
		c.run(ctx, t, NewLimiter(opts))
		// Limiter.Ping counts in windows of 1 ms: where they stand when
		// the keys are read is a matter of luck, and a key may be gone.
		fuzzy := strings.HasPrefix(c.name, "ping")
		fuzzyCase[c.name] = fuzzy
		lines := dumpKeys(ctx, t, rdb, c.opts.Window, fuzzy)
		sections[c.name] = lines
		fmt.Fprintf(&got, "# %s\n", c.name)
		for _, line := range lines {
			fmt.Fprintln(&got, line)
		}
	}
	const file = "testdata/keys.golden"
	if *updateKeys {
		if err := os.WriteFile(file, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{}
	var name string
	for _, line := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
		if n, ok := strings.CutPrefix(line, "# "); ok {
			name = n
			want[name] = []string{}
			continue
		}
		want[name] = append(want[name], line)
	}
	if len(want) != len(sections) {
		t.Errorf("%s has %d cases, the test %d", file, len(want), len(sections))
	}
	for name, lines := range sections {
		w, ok := want[name]
		if !ok {
			t.Errorf("%s has no case %s", file, name)
			continue
		}
		if fuzzyCase[name] {
			// Every key there is must be as the file says; one may be gone.
			for _, l := range lines {
				if !slices.Contains(w, l) {
					t.Errorf("%s: Redis holds %s, which %s does not", name, l, file)
				}
			}
			continue
		}
		if !slices.Equal(w, lines) {
			t.Errorf("%s: Redis holds other keys or fields than %s says (a replica of the last release would count apart):\n%s",
				name, file, lineDiff(strings.Join(w, "\n"), strings.Join(lines, "\n")))
		}
	}
}

// dumpKeys describes every key of rdb's server, one line each, sorted:
// its name, its type and what it holds, with what depends on the clock or
// on this process (a sliding window's number, a window's start, a slot's
// token) written as what it is, after checking that it is so. fuzzy says
// that the windows are too short for where they stand to be told.
func dumpKeys(ctx context.Context, t *testing.T, rdb *redis.Client, window time.Duration, fuzzy bool) []string {
	t.Helper()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	serverNow, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	nowMs := serverNow.UnixMilli()
	var lines []string
	for _, key := range keys {
		typ, err := rdb.Type(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if typ == "none" && fuzzy {
			continue // it expired after KEYS listed it: a key may be gone
		}
		ttl, err := rdb.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		name, class := slidingKeyName(t, key, nowMs, fuzzy), ttlClass(ttl)
		if fuzzy {
			class = "expires"
		}
		line := fmt.Sprintf("%s %s %s", strconv.Quote(name), typ, class)
		switch typ {
		case "string":
			v, err := rdb.Get(ctx, key).Result()
			if errors.Is(err, redis.Nil) && fuzzy {
				continue // it expired after TYPE
			}
			if err != nil {
				t.Fatal(err)
			}
			line += " " + v
		case "hash":
			h, err := rdb.HGetAll(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(h) == 0 && fuzzy {
				continue // it expired after TYPE
			}
			fields := slices.Sorted(func(yield func(string) bool) {
				for f := range h {
					if !yield(f) {
						return
					}
				}
			})
			for _, f := range fields {
				line += " " + strconv.Quote(f) + "=" + hashValue(t, f, h[f], nowMs, fuzzy)
			}
		case "zset":
			members, err := rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(members) == 0 && fuzzy {
				continue // it expired after TYPE
			}
			var ms []string
			for _, m := range members {
				ms = append(ms, slotMember(t, m.Member.(string)))
				// A ping's lease is 1 ms: it may have ended by the time it is read.
				if d := int64(m.Score) - nowMs; d < 0 && !fuzzy || d > window.Milliseconds() {
					t.Errorf("%s: slot %v scored %v, not the end of a lease of %v from now (%d)", key, m.Member, m.Score, window, nowMs)
				}
			}
			slices.Sort(ms)
			line += " " + strings.Join(ms, ",")
		}
		lines = append(lines, line)
	}
	slices.Sort(lines)
	return lines
}

var slidingKey = regexp.MustCompile(`^(\{.*\}:\d+:)(\d+)$`)

// slidingKeyName is key with a sliding window's number written as <now>
// or <now-1> (<recent> when fuzzy), after checking that it is the number
// of the window that holds nowMs, or of the one before. A window's key
// lives two windows from its last write, so when fuzzy (windows of 1 ms,
// and a loaded machine between the limiter's request and the read of
// TIME) it may also be the one before that.
func slidingKeyName(t *testing.T, key string, nowMs int64, fuzzy bool) string {
	m := slidingKey.FindStringSubmatch(key)
	if m == nil {
		return key
	}
	ms, _ := strconv.ParseInt(m[1][strings.LastIndexByte(m[1][:len(m[1])-1], ':')+1:len(m[1])-1], 10, 64)
	n, _ := strconv.ParseInt(m[2], 10, 64)
	switch {
	case fuzzy && nowMs/ms >= n && nowMs/ms <= n+2:
		return m[1] + "<recent>"
	case nowMs/ms == n:
		return m[1] + "<now>"
	case nowMs/ms == n+1:
		return m[1] + "<now-1>"
	}
	t.Errorf("sliding key %s: window %d is neither the one holding %d ms nor the one before", key, n, nowMs)
	return key
}

// ttlClass says whether a key expires: every key the limiter writes must.
func ttlClass(ttl time.Duration) string {
	switch {
	case ttl > 0:
		return "expires"
	case ttl == -1:
		return "NO-EXPIRY"
	}
	return "gone"
}

// hashValue is a field of a tenant's hash of limits: a count as it is, a
// time (a window's start or end, a calendar period's start, the hash's
// expiry) as what it is, after checking that it is near the server's now;
// when fuzzy, as a time, earlier or later. The quotas of goldenCases
// named for a calendar period (day, week, month, year) are of that
// period: their start must be the start of the one that holds now.
func hashValue(t *testing.T, field, v string, nowMs int64, fuzzy bool) string {
	if !strings.HasSuffix(field, ":s") && field != "e" {
		return v
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Errorf("field %s = %q, not a time in ms", field, v)
		return v
	}
	day := int64(24 * time.Hour / time.Millisecond)
	switch d := ms - nowMs; {
	case ms%day == 0 && ms <= nowMs:
		periods := map[string]Calendar{"day": CalendarDay, "week": CalendarWeek, "month": CalendarMonth, "year": CalendarYear}
		if c, ok := periods[strings.TrimSuffix(field, ":s")]; ok {
			if start, _ := c.Period(time.UnixMilli(nowMs)); start.UnixMilli() != ms {
				t.Errorf("field %s = %v, not the start of the %v that holds now (%v)", field, time.UnixMilli(ms).UTC(), c, start)
			}
		}
		return "<period start>"
	case fuzzy && d > -2*day:
		return "<time>"
	case d > 0:
		return "<later>"
	case d > -2*day:
		return "<earlier>"
	}
	t.Errorf("field %s = %d, too far from now (%d)", field, ms, nowMs)
	return v
}

var slotMemberForm = regexp.MustCompile(`^[0-9a-f]{16}:[0-9a-f]+(\.\d+)?$`)

// slotMember is a member of an in-flight sorted set with the process's
// token and the slot's number written as what they are.
func slotMember(t *testing.T, m string) string {
	if !slotMemberForm.MatchString(m) {
		t.Errorf("slot member %q is not <16 hex digits>:<hex number>[.n]", m)
		return m
	}
	if i := strings.IndexByte(m, '.'); i >= 0 {
		return "<token>:<slot>" + m[i:]
	}
	return "<token>:<slot>"
}

// lineDiff lists the lines of want missing from got, and those of got not
// in want.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if !slices.Contains(g, l) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}
