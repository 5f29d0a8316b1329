package main

import (
	"context"
	"github.com/gatewaykit/ratelimit/internal/testkit/syncbuf"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
)

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

const rules = `
domain: edge
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// start runs the command with args and a configuration of rules, and
// returns a client of its gRPC address, its metrics address, its log,
// the configuration's path, and a function that stops it and returns
// what run returned.
func start(t *testing.T, rules string, args ...string) (*grpc.ClientConn, net.Addr, *syncbuf.Buffer, string, func() error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 2)
	done := make(chan error, 1)
	var log syncbuf.Buffer
	args = append([]string{"-config", path, "-listen", "127.0.0.1:0", "-metrics", "127.0.0.1:0", "-reload-interval", "10ms"}, args...)
	go func() { done <- run(ctx, args, &log, ready) }()
	var grpcAddr, metricsAddr net.Addr
	select {
	case grpcAddr = <-ready:
		metricsAddr = <-ready
	case err := <-done:
		cancel()
		t.Fatalf("run returned %v before serving; log:\n%s", err, log.String())
	}
	conn, err := grpc.NewClient(grpcAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() error {
		stopped = true
		conn.Close()
		cancel()
		return <-done
	}
	t.Cleanup(func() {
		if !stopped {
			_ = stop()
		}
	})
	return conn, metricsAddr, &log, path, stop
}

func ask(t *testing.T, conn *grpc.ClientConn, value string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain:      "edge",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: value}}}},
	})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp.OverallCode
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// The command as an operator runs it: it decides, reports health and
// metrics, reloads its file, and stops on its context's end.
func TestCommandServesReloadsAndStops(t *testing.T) {
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"memory", func(*testing.T) []string { return nil }},
		{"redis", func(t *testing.T) []string { return []string{"-redis", "redis://" + redistest.Options(t).Addr + "/0"} }},
		{"cluster", func(t *testing.T) []string {
			addrs := redistest.ClusterAddrs(t)
			return []string{"-redis-cluster", "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, metrics, log, path, stop := start(t, rules, tc.args(t)...)
			value := t.Name() + time.Now().Format("150405.000000000")
			for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
				if got := ask(t, conn, value); got != want {
					t.Fatalf("call %d: %v, want %v", i+1, got, want)
				}
			}
			for _, service := range []string{"", "ratelimit"} {
				h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
				if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
					t.Errorf("health of %q: %v %v, want SERVING", service, h, err)
				}
			}
			if body := get(t, "http://"+metrics.String()+"/metrics"); !strings.Contains(body, `ratelimit_decisions_total{decider="counter",limiter="edge.tenant",outcome="limited"} 1`) {
				t.Errorf("/metrics does not count the refusal of edge.tenant:\n%s", body)
			}
			if body := get(t, "http://"+metrics.String()+"/healthcheck"); strings.TrimSpace(body) != "OK" {
				t.Errorf("/healthcheck: %q", body)
			}
			// A new limit of 3: the tenant that spent 2 has 1 more.
			tmp := path + ".new"
			if err := os.WriteFile(tmp, []byte(strings.Replace(rules, "requests_per_unit: 2", "requests_per_unit: 3", 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
			if err := redistest.Poll(5*time.Second, func() error {
				if !strings.Contains(log.String(), "configuration loaded") {
					return io.ErrNoProgress
				}
				return nil
			}); err != nil {
				t.Fatalf("no reload in the log:\n%s", log.String())
			}
			if got := ask(t, conn, value); got != rlsv3.RateLimitResponse_OK {
				t.Fatalf("after the reload to 3: %v, want OK", got)
			}
			if got := ask(t, conn, value); got != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("after the reload, the 4th call: %v, want OVER_LIMIT", got)
			}
			if err := stop(); err != nil {
				t.Fatalf("run returned %v on its context's end", err)
			}
			if !strings.Contains(log.String(), "stopping") {
				t.Errorf("the log does not say it stops:\n%s", log.String())
			}
		})
	}
}

func TestCommandRefusesBadStarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: fortnight}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "-config is required"},
		{[]string{"-config", path}, "fortnight"},
		{[]string{"-config", filepath.Join(t.TempDir(), "missing.yaml")}, "no such file"},
		{[]string{"-config", path, "extra"}, "unexpected arguments"},
		{[]string{"-config", path, "-redis", "http://127.0.0.1:1"}, "-redis"},
		{[]string{"-config", path, "-redis-cluster", "http://127.0.0.1:1"}, "-redis-cluster"},
		{[]string{"-config", path, "-redis", "redis://127.0.0.1:1", "-redis-cluster", "redis://127.0.0.1:2"}, "give one"},
	} {
		err := run(context.Background(), tc.args, io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %q: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}

// The example configuration that the command's doc and docs/envoy.md
// name loads.
func TestExampleConfigLoads(t *testing.T) {
	conn, _, _, _, _ := start(t, mustRead(t, "example.yaml"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain:      "api",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}}}},
	})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 10 {
		t.Fatalf("a tenant of the example: %v %v, want OK by the limit of 10 a second", resp, err)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
