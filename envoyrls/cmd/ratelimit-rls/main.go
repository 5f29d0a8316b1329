// Command ratelimit-rls is Envoy's rate limit service (RLS v3) on the
// ratelimit library: it reads envoyproxy/ratelimit's configuration, and
// decides every descriptor exactly across replicas that share one Redis,
// by fixed or sliding windows, token buckets and periods of the calendar.
//
//	ratelimit-rls -config ratelimit.yaml -redis redis://127.0.0.1:6379/0
//
// Without -redis it counts in memory, for this process alone: enough to
// try it on a laptop, with the example beside this file:
//
//	go run ./cmd/ratelimit-rls -config cmd/ratelimit-rls/example.yaml
//
// It serves gRPC on -listen (the RateLimitService and the gRPC health
// service, under "" and "ratelimit"), and Prometheus' /metrics and
// /healthcheck over HTTP on -metrics. While Redis fails, each replica
// decides in its own memory at each rule's limits (-fallback=false fails
// open instead). It reloads -config when the file (or a file of the
// directory) changes; a configuration that does not load leaves the
// running one in place, and the log says why. See docs/envoy.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/envoyrls"
	ratelimitprom "github.com/gatewaykit/ratelimit/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "ratelimit-rls:", err)
		os.Exit(1)
	}
}

// flags are the command's settings.
type flags struct {
	config, redisURL, clusterURL, listen, metrics string
	storeTimeout, reload                          time.Duration
	failClosed, fallback, headers                 bool
}

func parse(args []string) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("ratelimit-rls", flag.ContinueOnError)
	fs.StringVar(&f.config, "config", "", "the configuration: a YAML file, or a directory of them, in envoyproxy/ratelimit's format (required)")
	fs.StringVar(&f.redisURL, "redis", "", "the Redis every replica shares, as redis://[user:password@]host:port/db (rediss:// for TLS); without it, counts stay in this process's memory")
	fs.StringVar(&f.clusterURL, "redis-cluster", "", "a Redis Cluster instead, as redis://[user:password@]host:port?addr=host2:port2&addr=... (rediss:// for TLS)")
	fs.StringVar(&f.listen, "listen", ":8081", "the gRPC address: the RateLimitService and the health service")
	fs.StringVar(&f.metrics, "metrics", ":6070", "the HTTP address of /metrics and /healthcheck; empty for none")
	fs.DurationVar(&f.storeTimeout, "store-timeout", 15*time.Millisecond, "the most a call waits for the store; Envoy's filter waits 20ms by default")
	fs.DurationVar(&f.reload, "reload-interval", time.Second, "how often the configuration is read again to see whether it changed")
	fs.BoolVar(&f.failClosed, "fail-closed", false, "answer OVER_LIMIT when the store fails, instead of OK")
	fs.BoolVar(&f.fallback, "fallback", true, "while the store fails, decide in this process's memory at each rule's limits (each replica apart); -fallback=false fails open, as envoyproxy/ratelimit does")
	fs.BoolVar(&f.headers, "headers", false, "add the RateLimit-Policy and RateLimit fields to every answer's response_headers_to_add")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if f.config == "" {
		return f, errors.New("-config is required: the YAML file of the rules")
	}
	if f.redisURL != "" && f.clusterURL != "" {
		return f, errors.New("-redis and -redis-cluster: give one")
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return f, nil
}

// run runs the service until ctx ends: then it stops serving, letting
// the calls under way finish. It logs to logw, and sends the addresses it
// listens on (gRPC, then metrics when served) to ready when not nil.
func run(ctx context.Context, args []string, logw io.Writer, ready chan<- net.Addr) error {
	f, err := parse(args)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(logw, nil))

	collector := ratelimitprom.NewCollector()
	opts := envoyrls.Options{
		StoreTimeout: f.storeTimeout,
		FailClosed:   f.failClosed,
		Headers:      f.headers,
		Logger:       logger,
		Metrics:      collector,
	}
	rdb, addr, err := redisClient(f)
	if err != nil {
		return err
	}
	if rdb != nil {
		defer rdb.Close()
		redis.SetLogger(ratelimit.RedisLogger(logger))
		opts.Store = ratelimit.NewRedisCounter(rdb)
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := rdb.Ping(pctx).Err(); err != nil {
			logger.Warn("ratelimit-rls: Redis does not answer yet; calls are decided as the store's failures are until it does",
				slog.String("addr", addr), slog.Any("err", err))
		}
		cancel()
	}
	if f.fallback && rdb != nil { // memory does not fail
		fb := ratelimit.NewMemoryCounter()
		defer fb.Close()
		opts.Fallback = fb
	}
	srv := envoyrls.NewServer(opts)
	defer srv.Close()
	if err := srv.Watch(ctx, f.config, f.reload); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	srv.Register(g)
	hs := health.NewServer()
	hs.SetServingStatus("ratelimit", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)

	errc := make(chan error, 2)
	go func() { errc <- g.Serve(ln) }()
	var hsrv *http.Server
	var metricsAddr net.Addr
	if f.metrics != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collector, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthcheck", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "OK") })
		hsrv = &http.Server{Addr: f.metrics, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		mln, err := net.Listen("tcp", f.metrics)
		if err != nil {
			g.Stop()
			return err
		}
		go func() { errc <- hsrv.Serve(mln) }()
		logger.Info("ratelimit-rls: metrics", slog.String("addr", mln.Addr().String()))
		metricsAddr = mln.Addr()
	}
	if ready != nil {
		ready <- ln.Addr()
		if metricsAddr != nil {
			ready <- metricsAddr
		}
	}
	logger.Info("ratelimit-rls: serving", slog.String("grpc", ln.Addr().String()), slog.String("config", f.config),
		slog.String("store", storeName(addr)))

	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.Stop()
			return err
		}
	}
	logger.Info("ratelimit-rls: stopping")
	hs.Shutdown()
	if hsrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hsrv.Shutdown(sctx)
	}
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		g.Stop()
	}
	return nil
}

// redisClient is the client of -redis or -redis-cluster, and the
// address it names first; nil without either.
func redisClient(f flags) (redis.UniversalClient, string, error) {
	switch {
	case f.redisURL != "":
		ro, err := redis.ParseURL(f.redisURL)
		if err != nil {
			return nil, "", fmt.Errorf("-redis: %w", err)
		}
		return redis.NewClient(ro), ro.Addr, nil
	case f.clusterURL != "":
		co, err := redis.ParseClusterURL(f.clusterURL)
		if err != nil {
			return nil, "", fmt.Errorf("-redis-cluster: %w", err)
		}
		return redis.NewClusterClient(co), "cluster " + strings.Join(co.Addrs, ","), nil
	}
	return nil, "", nil
}

// storeName says where the counts are, for the log.
func storeName(addr string) string {
	if addr == "" {
		return "memory (this process alone)"
	}
	return "redis " + addr
}
