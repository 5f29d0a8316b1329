package envoyrls_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/envoyrls"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/gatewaykit/ratelimit/store"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

// serve starts srv on a loopback TCP port and returns a client of it, as
// Envoy's filter would call it: go-control-plane's generated stubs over
// a real connection.
func serve(t testing.TB, srv *envoyrls.Server) rlsv3.RateLimitServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// newServer returns a Server of opts with the configuration yaml loaded,
// and a client of it.
func newServer(t testing.TB, opts envoyrls.Options, yaml string) (*envoyrls.Server, rlsv3.RateLimitServiceClient) {
	t.Helper()
	srv := envoyrls.NewServer(opts)
	t.Cleanup(func() { srv.Close() })
	load(t, srv, yaml)
	return srv, serve(t, srv)
}

// load loads yaml into srv, failing the test when it does not load.
func load(t testing.TB, srv *envoyrls.Server, yaml string) {
	t.Helper()
	cfgs, err := envoyrls.ParseConfig("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if err := srv.Load(cfgs); err != nil {
		t.Fatalf("Load: %v", err)
	}
}

// writeFile writes content to a file of dir, and returns its path. It
// writes a file beside it and renames it, as a deploy swaps a file: a
// watcher that reads the file meanwhile reads the old content or the
// new, never a part.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// desc is a descriptor of the entries kv, key then value.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// hits sets d's own hits_addend to n.
func hits(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// ask calls c for domain's descriptors, failing the test on an error.
func ask(t testing.TB, c rlsv3.RateLimitServiceClient, domain string, ds ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := askErr(c, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v", domain, err)
	}
	return resp
}

func askErr(c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.ShouldRateLimit(ctx, req)
}

// codes are the codes of resp: the overall one, then each status's.
func codesOf(resp *rlsv3.RateLimitResponse) string {
	s := []string{resp.GetOverallCode().String()}
	for _, st := range resp.GetStatuses() {
		s = append(s, st.GetCode().String())
	}
	return strings.Join(s, " ")
}

// expectCodes checks resp's codes: the overall one, then each status's.
func expectCodes(t testing.TB, resp *rlsv3.RateLimitResponse, want string) {
	t.Helper()
	if got := codesOf(resp); got != want {
		t.Fatalf("codes %q, want %q; response %v", got, want, resp)
	}
}

// shiftedStore is a MemoryCounter on a clock of the test's: it decides
// every request at the time the test set (at, advance), whatever time
// the request read, so that a test moves time to a month's end and past
// it, and a machine that stalls between two calls moves nothing.
type shiftedStore struct {
	*ratelimit.MemoryCounter
	now atomic.Int64 // Unix nanoseconds
}

// quietHour is where a new shiftedStore's clock stands: noon UTC, far
// from any window's or period's end.
var quietHour = time.Date(2027, 3, 10, 12, 0, 0, 0, time.UTC)

// newShiftedStore is a shiftedStore whose clock stands at quietHour.
func newShiftedStore() *shiftedStore {
	s := &shiftedStore{MemoryCounter: ratelimit.NewMemoryCounter()}
	s.at(quietHour)
	return s
}

// at sets the store's clock to t.
func (s *shiftedStore) at(t time.Time) { s.now.Store(t.UnixNano()) }

// advance moves the store's clock on by d.
func (s *shiftedStore) advance(d time.Duration) { s.now.Add(int64(d)) }

func (s *shiftedStore) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	c := *r
	c.Now = time.Unix(0, s.now.Load())
	return s.MemoryCounter.Take(ctx, &c, res)
}

func (s *shiftedStore) Give(ctx context.Context, r *store.Request, m store.Marks) error {
	c := *r
	c.Now = time.Unix(0, s.now.Load())
	return s.MemoryCounter.Give(ctx, &c, m)
}

// redisStore is a RedisCounter over a client of its own of the tests'
// Redis, as a replica of its own would have.
func redisStore(t testing.TB) store.Store {
	t.Helper()
	rdb := redis.NewClient(redistest.Options(t))
	t.Cleanup(func() { rdb.Close() })
	return ratelimit.NewRedisCounter(rdb)
}

// uniqueValue is a descriptor value that no other run of a test has
// counted under in a shared Redis.
func uniqueValue(t testing.TB) string {
	return t.Name() + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

var errorf = fmt.Errorf
