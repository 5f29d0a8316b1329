package envoyrls_test

import (
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gatewaykit/ratelimit/envoyrls"
	"github.com/gatewaykit/ratelimit/internal/testkit/syncbuf"
)

// The protocol's semantics, on the in-memory store, through a real gRPC
// connection: statuses, all or nothing, hits, reads, negative hits,
// replaces, unlimited, blocked and shadow descriptors.

const perMinute = `
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3, name: per-user}
  - key: plan
    value: free
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: route
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: allowed
`

func TestStatusesReportTheLimit(t *testing.T) {
	_, c := newServer(t, envoyrls.Options{}, perMinute)
	for i, want := range []uint32{2, 1, 0} {
		resp := ask(t, c, "api", desc("user", "alice"))
		expectCodes(t, resp, "OK OK")
		st := resp.Statuses[0]
		if st.LimitRemaining != want {
			t.Errorf("call %d: remaining %d, want %d", i+1, st.LimitRemaining, want)
		}
		l := st.GetCurrentLimit()
		if l.GetRequestsPerUnit() != 3 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || l.GetName() != "per-user" {
			t.Errorf("call %d: current_limit %v, want 3 per MINUTE named per-user", i+1, l)
		}
		if d := st.GetDurationUntilReset().AsDuration(); d <= 0 || d > time.Minute {
			t.Errorf("call %d: duration_until_reset %v, want within the minute", i+1, d)
		}
	}
	resp := ask(t, c, "api", desc("user", "alice"))
	expectCodes(t, resp, "OVER_LIMIT OVER_LIMIT")
	if st := resp.Statuses[0]; st.LimitRemaining != 0 || st.GetCurrentLimit().GetRequestsPerUnit() != 3 || st.GetDurationUntilReset() == nil {
		t.Errorf("the refusal's status %v: want remaining 0, the limit and its reset", st)
	}
	// Each value of a key without one in the file is a tenant of its own.
	expectCodes(t, ask(t, c, "api", desc("user", "bob")), "OK OK")
}

func TestNoRuleAnswersOK(t *testing.T) {
	_, c := newServer(t, envoyrls.Options{}, perMinute)
	for _, tc := range []struct {
		name   string
		domain string
		kv     []string
	}{
		{"an unknown domain", "elsewhere", []string{"user", "alice"}},
		{"an unknown key", "api", []string{"nobody", "x"}},
		{"more entries than the tree is deep", "api", []string{"user", "alice", "extra", "y"}},
		{"a value that no descriptor names", "api", []string{"plan", "paid"}},
		{"a descriptor with neither a limit nor children", "api", []string{"allowed", "x"}},
		{"no entries", "api", nil},
	} {
		for range 5 {
			resp := ask(t, c, tc.domain, desc(tc.kv...))
			expectCodes(t, resp, "OK OK")
			if st := resp.Statuses[0]; st.CurrentLimit != nil || st.LimitRemaining != 0 || st.DurationUntilReset != nil {
				t.Errorf("%s: status %v, want a bare OK", tc.name, st)
			}
		}
	}
}

func TestEmptyRequestIsAnError(t *testing.T) {
	_, c := newServer(t, envoyrls.Options{}, perMinute)
	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: "", Descriptors: nil},
		{Domain: "", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "alice")}},
		{Domain: "api"},
	} {
		_, err := askErr(c, req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: error %v, want InvalidArgument", req, err)
		}
	}
}

// The descriptors of one request are decided all or nothing: when one is
// over its limit the request is, and what the others took is given back.
func TestDescriptorsAllOrNothing(t *testing.T) {
	_, c := newServer(t, envoyrls.Options{}, perMinute)
	expectCodes(t, ask(t, c, "api", desc("user", "carol"), desc("plan", "free")), "OK OK OK")
	for range 5 {
		resp := ask(t, c, "api", desc("user", "carol"), desc("plan", "free"))
		expectCodes(t, resp, "OVER_LIMIT OK OVER_LIMIT")
		if got := resp.Statuses[0].LimitRemaining; got != 2 {
			t.Fatalf("the descriptor within its limit reports %d left, want 2: a refused request spends nothing", got)
		}
	}
	// carol spent 1 of 3: two more, alone.
	expectCodes(t, ask(t, c, "api", desc("user", "carol")), "OK OK")
	expectCodes(t, ask(t, c, "api", desc("user", "carol")), "OK OK")
	expectCodes(t, ask(t, c, "api", desc("user", "carol")), "OVER_LIMIT OVER_LIMIT")
}

// The request's hits_addend is every descriptor's cost (0 meaning 1), a
// descriptor's own overrides it, and a descriptor's 0 reads, spending
// nothing.
func TestHitsAddend(t *testing.T) {
	_, c := newServer(t, envoyrls.Options{}, perMinute)
	req := &rlsv3.RateLimitRequest{Domain: "api", HitsAddend: 2, Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "dave")}}
	resp, err := askErr(c, req)
	if err != nil || codesOf(resp) != "OK OK" || resp.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("hits_addend 2: %v %v, want OK with 1 left", resp, err)
	}
	for range 3 {
		resp = ask(t, c, "api", hits(desc("user", "dave"), 0))
		expectCodes(t, resp, "OK OK")
		if got := resp.Statuses[0].LimitRemaining; got != 1 {
			t.Fatalf("a read reports %d left, want 1: a read spends nothing", got)
		}
	}
	expectCodes(t, ask(t, c, "api", hits(desc("user", "dave"), 2)), "OVER_LIMIT OVER_LIMIT")
	expectCodes(t, ask(t, c, "api", hits(desc("user", "dave"), 1)), "OK OK")
	// Nothing left: a read says so.
	resp = ask(t, c, "api", hits(desc("user", "dave"), 0))
	expectCodes(t, resp, "OVER_LIMIT OVER_LIMIT")
	// A cost past the limit never fits.
	expectCodes(t, ask(t, c, "api", hits(desc("user", "erin"), 4)), "OVER_LIMIT OVER_LIMIT")
	expectCodes(t, ask(t, c, "api", hits(desc("user", "erin"), 3)), "OK OK")
}

// is_negative_hits gives hits_addend back, into the window that runs.
func TestNegativeHitsGiveBack(t *testing.T) {
	_, c := newServer(t, envoyrls.Options{}, perMinute)
	expectCodes(t, ask(t, c, "api", hits(desc("user", "fay"), 3)), "OK OK")
	expectCodes(t, ask(t, c, "api", desc("user", "fay")), "OVER_LIMIT OVER_LIMIT")
	back := hits(desc("user", "fay"), 2)
	back.IsNegativeHits = true
	expectCodes(t, ask(t, c, "api", back), "OK OK")
	expectCodes(t, ask(t, c, "api", desc("user", "fay")), "OK OK")
	expectCodes(t, ask(t, c, "api", desc("user", "fay")), "OK OK")
	expectCodes(t, ask(t, c, "api", desc("user", "fay")), "OVER_LIMIT OVER_LIMIT")
	// More than was spent gives back what was, and no credit.
	back = hits(desc("user", "gus"), 10)
	back.IsNegativeHits = true
	expectCodes(t, ask(t, c, "api", back), "OK OK")
	expectCodes(t, ask(t, c, "api", hits(desc("user", "gus"), 3)), "OK OK")
	expectCodes(t, ask(t, c, "api", desc("user", "gus")), "OVER_LIMIT OVER_LIMIT")
}

func TestUnlimitedBlockedAndShadow(t *testing.T) {
	_, c := newServer(t, envoyrls.Options{}, perMinute)
	for range 5 {
		resp := ask(t, c, "api", desc("route", "/a"))
		expectCodes(t, resp, "OK OK")
		if st := resp.Statuses[0]; st.LimitRemaining != math.MaxUint32 || st.CurrentLimit != nil {
			t.Fatalf("unlimited: %v, want remaining MaxUint32 and no limit, as the reference answers", st)
		}
	}
	resp := ask(t, c, "api", desc("banned", "x"))
	expectCodes(t, resp, "OVER_LIMIT OVER_LIMIT")
	if l := resp.Statuses[0].GetCurrentLimit(); l.GetRequestsPerUnit() != 0 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
		t.Errorf("a limit of 0: current_limit %v", l)
	}
	expectCodes(t, ask(t, c, "api", hits(desc("banned", "x"), 0)), "OK OK")
	// A blocked descriptor refuses the whole request, which spends nothing.
	expectCodes(t, ask(t, c, "api", desc("user", "hal"), desc("banned", "x")), "OVER_LIMIT OK OVER_LIMIT")
	if got := ask(t, c, "api", hits(desc("user", "hal"), 0)).Statuses[0].LimitRemaining; got != 3 {
		t.Errorf("after a refusal by a blocked descriptor, %d left, want 3", got)
	}
	// A shadow descriptor over its limit answers OK with nothing left,
	// and refuses nothing.
	expectCodes(t, ask(t, c, "api", desc("trial", "t1")), "OK OK")
	for range 3 {
		resp = ask(t, c, "api", desc("trial", "t1"), desc("user", "ida"))
		expectCodes(t, resp, "OK OK OK")
		if st := resp.Statuses[0]; st.LimitRemaining != 0 || st.GetCurrentLimit().GetRequestsPerUnit() != 1 {
			t.Fatalf("a shadow descriptor over its limit: %v, want remaining 0 and its limit", st)
		}
	}
}

// Envoy may send a descriptor with a limit of its own (a "limit" action
// from metadata): it is not applied, the configured rule decides, and
// the log says so.
func TestLimitOverrideIsNotApplied(t *testing.T) {
	var log syncbuf.Buffer
	_, c := newServer(t, envoyrls.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))}, perMinute)
	override := func() *rlv3.RateLimitDescriptor {
		d := desc("user", "olga")
		d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 100, Unit: typev3.RateLimitUnit_SECOND}
		return d
	}
	for range 3 {
		expectCodes(t, ask(t, c, "api", override()), "OK OK")
	}
	resp := ask(t, c, "api", override())
	expectCodes(t, resp, "OVER_LIMIT OVER_LIMIT")
	if l := resp.Statuses[0].GetCurrentLimit(); l.GetRequestsPerUnit() != 3 {
		t.Errorf("current_limit %v, want the configured 3 a minute", l)
	}
	if !strings.Contains(log.String(), "limit override is not applied") {
		t.Errorf("the log does not say the override was not applied: %s", log.String())
	}
}
