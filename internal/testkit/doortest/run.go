// The harness a case runs on: its limiter options, the door it sends
// requests through, and the checks of answers and counts.

package doortest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit"
	storepkg "github.com/gatewaykit/ratelimit/store"
)

// run is one case on one door and store. Each case counts under a limiter
// name of its own, so that runs sharing a Redis never meet.
type run struct {
	t     *testing.T
	door  Door
	store store
	name  string
}

// opts returns Options on a fresh working counter with the case's name.
func (r *run) opts(limit int) ratelimit.Options {
	return ratelimit.Options{Counter: r.store.counter(r.t), Name: r.name, Limit: limit, Window: time.Minute}
}

// serve sets the door up with s.
func (r *run) serve(s Settings) func(req request) *http.Response {
	srv := r.door.New(r.t, s)
	return func(req request) *http.Response {
		path := req.path
		if path == "" {
			path = "/"
		}
		hr := httptest.NewRequest(http.MethodGet, path, nil)
		if req.tenant != "" {
			hr.Header.Set("X-Tenant", req.tenant)
		}
		if req.client != "" {
			hr.Header.Set("X-Client-IP", req.client)
		}
		if req.cost != 0 {
			hr.Header.Set("X-Cost", strconv.Itoa(req.cost))
		}
		if req.ctx != "" {
			hr.Header.Set(ContextHeader, req.ctx)
		}
		if req.after != "" {
			hr.Header.Set(CostAfterHeader, req.after)
		}
		resp := srv(hr)
		r.t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
}

type request struct {
	tenant, client, path string
	cost                 int    // 0: no X-Cost header
	ctx                  string // how its context is done (see RequestContext); "": it is not
	after                string // its CostAfterHeader: what the handler reports it cost; "": none
}

// count returns the count key holds in c, by one more increment: a case
// calls it once it sends no more requests under key.
func (r *run) count(c storepkg.Store, key string) int64 {
	r.t.Helper()
	n, err := c.(counter).Incr(context.Background(), key, time.Minute)
	if err != nil {
		r.t.Fatalf("Incr(%s): %v", key, err)
	}
	return n - 1
}

// stored returns what key holds on the store's servers, read directly,
// and whether it exists; ok is false on memory, which has no server.
func (r *run) stored(key string) (value string, exists, ok bool) {
	r.t.Helper()
	if r.store.client == nil {
		return "", false, false
	}
	v, err := r.store.client(r.t).Get(context.Background(), key).Result()
	switch {
	case err == redis.Nil:
		return "", false, true
	case err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE"):
		return "(not a string)", true, true
	case err != nil:
		r.t.Fatalf("GET %s: %v", key, err)
	}
	return v, true, true
}

// key is the key of tenant's part under the case's limiter name.
func (r *run) key(part string) string { return "rl:" + r.name + "#" + part }

// expect checks a response's status and rate limit fields. A field wanted
// as "" must be absent; "*" must be present.
func (r *run) expect(what string, resp *http.Response, status int, fields map[string]string) {
	r.t.Helper()
	if resp.StatusCode != status {
		r.t.Errorf("%s: status %d, want %d", what, resp.StatusCode, status)
	}
	for name, want := range fields {
		got, ok := resp.Header[http.CanonicalHeaderKey(name)]
		switch {
		case want == "" && ok:
			r.t.Errorf("%s: %s = %q, want none", what, name, got)
		case want == "*" && !ok:
			r.t.Errorf("%s: no %s", what, name)
		case want != "" && want != "*" && (len(got) != 1 || got[0] != want):
			r.t.Errorf("%s: %s = %q, want %q", what, name, got, want)
		}
	}
}

// checkCount checks that key holds want in c: on Redis read from the
// server as it is, on memory by one more increment (see count).
func (r *run) checkCount(c storepkg.Store, key string, want int64) {
	r.t.Helper()
	v, exists, ok := r.stored(key)
	if !ok {
		if n := r.count(c, key); n != want {
			r.t.Errorf("%s counted %d, want %d", key, n, want)
		}
		return
	}
	if !exists || v != strconv.FormatInt(want, 10) {
		r.t.Errorf("%s holds %q (exists: %v) on the server, want %d", key, v, exists, want)
	}
}

// uniqueName returns a limiter name no other run uses.
func uniqueName(t testing.TB) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "t" + hex.EncodeToString(b[:])
}
