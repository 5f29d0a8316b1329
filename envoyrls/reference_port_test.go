package envoyrls_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/gatewaykit/ratelimit/envoyrls"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
)

// The reference's (envoyproxy/ratelimit) Go integration tests, from
// test/integration/integration_test.go, ported onto this server with
// their configuration files (testdata/config/integration). Where this
// server answers otherwise by design, the test asserts this server's
// answer and a comment says what the reference asserts.
//
// The reference's statistics assertions (total_hits, over_limit,
// near_limit, within_limit, over_limit_with_local_cache) are not ported:
// this server has no such statistics; its Prometheus metrics count the
// decisions of each rule instead.

const (
	refOK   = rlsv3.RateLimitResponse_OK
	refOver = rlsv3.RateLimitResponse_OVER_LIMIT

	refSecond = rlsv3.RateLimitResponse_RateLimit_SECOND
	refMinute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	refHour   = rlsv3.RateLimitResponse_RateLimit_HOUR
	refDay    = rlsv3.RateLimitResponse_RateLimit_DAY
)

// refStatus is the reference tests' newDescriptorStatus: a status of
// code with the limit rpu per unit and remaining left. Its
// duration_until_reset is checked apart (see expectResponse).
func refStatus(code rlsv3.RateLimitResponse_Code, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, remaining uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:           code,
		CurrentLimit:   &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: unit},
		LimitRemaining: remaining,
	}
}

// refBare is a status without a limit, of a descriptor that no rule
// decided.
func refBare(code rlsv3.RateLimitResponse_Code) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: code}
}

func refResponse(code rlsv3.RateLimitResponse_Code, sts ...*rlsv3.RateLimitResponse_DescriptorStatus) *rlsv3.RateLimitResponse {
	return &rlsv3.RateLimitResponse{OverallCode: code, Statuses: sts}
}

// unitLength is how long a window of unit runs at most.
var unitLength = map[rlsv3.RateLimitResponse_RateLimit_Unit]time.Duration{
	refSecond: time.Second,
	refMinute: time.Minute,
	refHour:   time.Hour,
	refDay:    24 * time.Hour,
}

// expectResponse checks got against want as the reference's tests do,
// with proto.Equal on the whole response, its duration_until_reset
// copied from got: a status with a limit must carry one, above zero and
// at most its unit's length; one without a limit must not.
//
// Differs from the reference: its windows are aligned on the epoch, ours
// of SECOND, MINUTE and HOUR start at the descriptor's first request, so
// the duration until reset may be up to a whole unit; both are within
// (0, unit].
func expectResponse(t testing.TB, got, want *rlsv3.RateLimitResponse) {
	t.Helper()
	want = proto.Clone(want).(*rlsv3.RateLimitResponse)
	if len(got.GetStatuses()) == len(want.Statuses) {
		for i, w := range want.Statuses {
			g := got.Statuses[i]
			if w.CurrentLimit == nil {
				continue
			}
			d := g.GetDurationUntilReset()
			if d == nil {
				t.Fatalf("status %d: no duration_until_reset; response %v", i, got)
			}
			if most, ok := unitLength[w.CurrentLimit.Unit]; ok && (d.AsDuration() <= 0 || d.AsDuration() > most) {
				t.Fatalf("status %d: duration_until_reset %v, want within (0, %v]; response %v", i, d.AsDuration(), most, got)
			}
			w.DurationUntilReset = d
		}
	}
	if !proto.Equal(got, want) {
		t.Fatalf("response\n  %v\nwant\n  %v", got, want)
	}
}

// loadFiles loads the configuration files at paths into srv, at once.
func loadFiles(t testing.TB, srv *envoyrls.Server, paths ...string) {
	t.Helper()
	var cfgs []envoyrls.Config
	for _, p := range paths {
		c, err := envoyrls.LoadConfig(p)
		if err != nil {
			t.Fatalf("LoadConfig(%s): %v", p, err)
		}
		cfgs = append(cfgs, c...)
	}
	if err := srv.Load(cfgs); err != nil {
		t.Fatalf("Load(%v): %v", paths, err)
	}
}

const integrationDir = "testdata/config/integration"

// refStores are the stores the ported tests run on: the in-memory one,
// and Redis as a replica would use it.
var refStores = []struct {
	name string
	opts func(t *testing.T) envoyrls.Options
}{
	{"memory", func(*testing.T) envoyrls.Options { return envoyrls.Options{} }},
	{"redis", func(t *testing.T) envoyrls.Options {
		return envoyrls.Options{Store: redisStore(t), StoreTimeout: 5 * time.Second, FailClosed: true}
	}},
}

// TestReferenceBasicConfig is testBasicBaseConfig, steps 1 to 5, with
// basic.yaml and another.yaml. Every value is unique to the run, so that
// runs on a shared Redis never count in each other's keys.
func TestReferenceBasicConfig(t *testing.T) {
	for _, st := range refStores {
		t.Run(st.name, func(t *testing.T) {
			srv := envoyrls.NewServer(st.opts(t))
			t.Cleanup(func() { srv.Close() })
			loadFiles(t, srv, filepath.Join(integrationDir, "basic.yaml"), filepath.Join(integrationDir, "another.yaml"))
			c := serve(t, srv)

			t.Run("1 unknown domain", func(t *testing.T) {
				expectResponse(t, ask(t, c, "foo", desc("hello", "world")), refResponse(refOK, refBare(refOK)))
			})

			t.Run("2 key-only descriptor", func(t *testing.T) {
				expectResponse(t, ask(t, c, "basic", desc("key1", uniqueValue(t))),
					refResponse(refOK, refStatus(refOK, 50, refSecond, 49)))
			})

			t.Run("3 over the minute's limit", func(t *testing.T) {
				v := uniqueValue(t)
				for i := range 25 {
					resp := ask(t, c, "another", desc("key2", v))
					if i < 20 {
						expectResponse(t, resp, refResponse(refOK, refStatus(refOK, 20, refMinute, uint32(20-(i+1)))))
					} else {
						expectResponse(t, resp, refResponse(refOver, refStatus(refOver, 20, refMinute, 0)))
					}
				}
				// Differs from the reference: it counts the 5 refused
				// calls (its key holds 25, over_limit == i-19); ours are
				// not counted, so the key holds the limit, 20, and a read
				// says nothing is left, as the reference's would too.
				expectResponse(t, ask(t, c, "another", hits(desc("key2", v), 0)),
					refResponse(refOver, refStatus(refOver, 20, refMinute, 0)))
			})

			t.Run("4 two descriptors, one over", func(t *testing.T) {
				v := uniqueValue(t)
				for i := range 15 {
					resp := ask(t, c, "another", desc("key2", v), desc("key3", v))
					if i < 10 {
						expectResponse(t, resp, refResponse(refOK,
							refStatus(refOK, 20, refMinute, uint32(20-(i+1))),
							refStatus(refOK, 10, refHour, uint32(10-(i+1)))))
						continue
					}
					// Differs from the reference: it increments key2 on
					// every call, so its remaining goes on falling to
					// 20-(i+1) = 9 … 5 while key3 is OVER_LIMIT (with
					// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT it stays at
					// 10). Ours decides all or nothing: once key3 is over,
					// what key2 took is given back, so a refused call
					// spends nothing and key2's remaining stays 10, what
					// the 10 allowed calls left.
					expectResponse(t, resp, refResponse(refOver,
						refStatus(refOK, 20, refMinute, 10),
						refStatus(refOver, 10, refHour, 0)))
				}
			})

			t.Run("5 DAY duration until reset", func(t *testing.T) {
				v := uniqueValue(t)
				before := time.Now().UTC()
				resp1 := ask(t, c, "another", desc("key4", v))
				resp2 := ask(t, c, "another", desc("key4", v))
				after := time.Now().UTC()
				expectResponse(t, resp1, refResponse(refOK, refStatus(refOK, 20, refDay, 19)))
				expectResponse(t, resp2, refResponse(refOK, refStatus(refOK, 20, refDay, 18)))
				d1 := resp1.Statuses[0].GetDurationUntilReset().AsDuration()
				d2 := resp2.Statuses[0].GetDurationUntilReset().AsDuration()
				// The reference sleeps 2 s between the calls and asserts
				// that the second duration is smaller; without sleeping,
				// it must not be greater (unless midnight UTC passed
				// between the calls, which starts another day).
				if before.Truncate(24*time.Hour).Equal(after.Truncate(24*time.Hour)) && d2 > d1 {
					t.Errorf("duration_until_reset %v then %v: the second is greater", d1, d2)
				}
				// A DAY of a fixed window is the UTC calendar day here;
				// the reference's days are 86400 s windows aligned on the
				// epoch, which end at midnight UTC too: both reset then.
				midnight := after.Truncate(24 * time.Hour).Add(24 * time.Hour)
				if until := midnight.Sub(after); d2 > until+time.Second || d2 < until-5*time.Second {
					t.Errorf("duration_until_reset %v, want about %v: the time until midnight UTC", d2, until)
				}
			})
		})
	}
}

// TestReferenceReloadConfig is testConfigReload: a domain unknown before
// its file is in the watched directory, known while it is, and unknown
// again once it is deleted.
func TestReferenceReloadConfig(t *testing.T) {
	srv := envoyrls.NewServer(envoyrls.Options{})
	t.Cleanup(func() { srv.Close() })
	// The reference's config directory holds its other files all along:
	// basic.yaml stands for them.
	dir := t.TempDir()
	basic, err := os.ReadFile(filepath.Join(integrationDir, "basic.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	reload, err := os.ReadFile(filepath.Join(integrationDir, "reload.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	basicPath := writeFile(t, dir, "basic.yaml", string(basic))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.Watch(ctx, dir, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	c := serve(t, srv)

	// 1. Before the reload, the domain is unknown: OK without a limit.
	expectResponse(t, ask(t, c, "reload", desc("block", "foo")), refResponse(refOK, refBare(refOK)))

	// 2. The file goes into the directory: wait until it is loaded. The
	// poll reads (hits_addend 0) another value, spending nothing of foo.
	reloadPath := writeFile(t, dir, "reload.yaml", string(reload))
	poll(t, func() error {
		resp := ask(t, c, "reload", hits(desc("key1", "poll"), 0))
		if l := resp.Statuses[0].GetCurrentLimit(); l.GetRequestsPerUnit() != 50 || l.GetUnit() != refSecond {
			return errorf("reload.yaml not loaded yet: %v", resp)
		}
		return nil
	})

	// 3. The reloaded domain's limit decides.
	expectResponse(t, ask(t, c, "reload", desc("key1", "foo")), refResponse(refOK, refStatus(refOK, 50, refSecond, 49)))
	expectResponse(t, ask(t, c, "basic", desc("key1", "foo")), refResponse(refOK, refStatus(refOK, 50, refSecond, 49)))

	// 4. The file is deleted: a reload happens, and the domain is
	// unknown again while the other files' domains stay.
	if err := os.Remove(reloadPath); err != nil {
		t.Fatal(err)
	}
	poll(t, func() error {
		if resp := ask(t, c, "reload", desc("key1", "foo")); resp.Statuses[0].GetCurrentLimit() != nil {
			return errorf("reload.yaml still loaded: %v", resp)
		}
		return nil
	})
	expectResponse(t, ask(t, c, "reload", desc("key1", "foo")), refResponse(refOK, refBare(refOK)))
	expectResponse(t, ask(t, c, "basic", desc("one_per_minute", "x")), refResponse(refOK, refStatus(refOK, 1, refMinute, 0)))

	// Beyond the reference's test, which never empties the directory: a
	// directory without configuration files is not an error for
	// LoadConfig here; it loads zero configurations, so every domain
	// becomes unknown and every request is answered OK.
	if err := os.Remove(basicPath); err != nil {
		t.Fatal(err)
	}
	poll(t, func() error {
		if resp := ask(t, c, "basic", desc("one_per_minute", "x")); resp.Statuses[0].GetCurrentLimit() != nil {
			return errorf("basic.yaml still loaded: %v", resp)
		}
		return nil
	})
	expectResponse(t, ask(t, c, "basic", desc("one_per_minute", "x")), refResponse(refOK, refBare(refOK)))
	if cfgs, err := envoyrls.LoadConfig(dir); err != nil || len(cfgs) != 0 {
		t.Errorf("LoadConfig of an empty directory: %v, %v; want no configuration and no error", cfgs, err)
	}
}

// poll calls check until it returns nil, failing the test after 5 s.
func poll(t testing.TB, check func() error) {
	t.Helper()
	if err := redistest.Poll(5*time.Second, check); err != nil {
		t.Fatal(err)
	}
}

// TestReferenceShareThreshold is TestShareThreshold: every value that
// files/* matches shares one count, each of files_no_share/* has its own.
func TestReferenceShareThreshold(t *testing.T) {
	yaml, err := os.ReadFile(filepath.Join(integrationDir, "share_threshold.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range refStores {
		t.Run(st.name, func(t *testing.T) {
			// The shared count is the pattern's, whatever the values: on
			// a shared Redis, a domain unique to the run keeps runs
			// within the hour apart.
			domain := "share-threshold-test"
			if st.name == "redis" {
				domain = uniqueValue(t)
			}
			srv := envoyrls.NewServer(st.opts(t))
			t.Cleanup(func() { srv.Close() })
			load(t, srv, strings.Replace(string(yaml), "domain: share-threshold-test", "domain: "+domain, 1))
			c := serve(t, srv)

			// 1. The reference only checks each answer is OK or
			// OVER_LIMIT (its shared count may hold earlier runs'); ours
			// starts afresh, so each is OK with one fewer left.
			for i := range 10 {
				expectResponse(t, ask(t, c, domain, desc("files", "files/a.pdf")),
					refResponse(refOK, refStatus(refOK, 10, refHour, uint32(9-i))))
			}
			// 2. Another value shares the count a.pdf spent.
			expectResponse(t, ask(t, c, domain, desc("files", "files/b.csv")),
				refResponse(refOver, refStatus(refOver, 10, refHour, 0)))
			// 3. Without share_threshold, each value counts apart.
			for i := range 10 {
				v := "files_no_share/" + uniqueValue(t) + "-" + string(rune('a'+i))
				expectResponse(t, ask(t, c, domain, desc("files_no_share", v)),
					refResponse(refOK, refStatus(refOK, 10, refHour, 9)))
			}
		})
	}
}
