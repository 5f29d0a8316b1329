package envoyrls_test

import (
	"testing"

	"github.com/gatewaykit/ratelimit/envoyrls"
)

// With Options.Headers every answer carries the IETF RateLimit-Policy and
// RateLimit fields in response_headers_to_add, an item per descriptor
// that a limit decided, named by its rate_limit's name or its rule's path.
func TestHeadersToAdd(t *testing.T) {
	_, c := newServer(t, envoyrls.Options{Headers: true}, perMinute)
	resp := ask(t, c, "api", desc("user", "nia"), desc("plan", "free"), desc("route", "/x"), desc("nobody", "y"))
	expectCodes(t, resp, "OK OK OK OK OK")
	got := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	want := map[string]string{
		"RateLimit-Policy": `"per-user";q=3;w=60, "api.plan_free";q=1;w=60`,
		"RateLimit":        `"per-user";r=2;t=60, "api.plan_free";r=0;t=60`,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("headers %v, want only %v", got, want)
	}
	// Without Options.Headers, none.
	_, c = newServer(t, envoyrls.Options{}, perMinute)
	if resp := ask(t, c, "api", desc("user", "nia")); len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("headers without Options.Headers: %v", resp.ResponseHeadersToAdd)
	}
}
