// Command rlsload drives an Envoy Rate Limit Service (RLS v3,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) for the
// side-by-side benchmark in ../compare.sh.
//
// Modes:
//
//	-mode burst     open -n calls at once (all released together after the
//	                connections are up) for one descriptor and count how
//	                many were allowed.
//	-mode load      -c clients call as fast as they can for -d, spreading
//	                calls round robin over -tenants descriptor values, and
//	                report calls/s and latency percentiles.
//	-mode wait      retry one ShouldRateLimit until it answers without a
//	                gRPC error, or fail after -wait.
//	-mode freeport  print -n free loopback TCP ports, one a line.
//
// With -redis host:port, burst and load read INFO commandstats before and
// after the run and report Redis commands per call. With -metrics URL
// they read ratelimit-rls's Prometheus page before and after and report
// the calls it answered by failing open (failed_open=N).
//
// With -timeout D (burst and load), every call gets a context deadline of
// D, so gRPC sends grpc-timeout as Envoy's rate limit filter does (its
// default timeout is 20ms). A call that runs out of time counts as
// deadline_exceeded; envoy_lets_through counts the calls Envoy would let
// through with its default failure_mode_deny=false: OK answers, UNKNOWN
// answers (Envoy treats every code but OVER_LIMIT as OK), deadlines and
// other errors. -timeout 0 (the default) sets no deadline.
//
// Every run prints one "result key=value ..." line for scripts, then a
// human summary on lines starting with "# ".
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// options are the command-line flags.
type options struct {
	mode    string
	addr    string
	label   string
	n       int
	c       int
	d       time.Duration
	tenants int
	domain  string
	key     string
	value   string
	conns   int
	redis   string
	timeout time.Duration
	wait    time.Duration
	metrics string
}

func main() {
	var o options
	flag.StringVar(&o.mode, "mode", "burst", "burst, load, wait or freeport")
	flag.StringVar(&o.addr, "addr", "127.0.0.1:8081", "gRPC address of the rate limit service")
	flag.StringVar(&o.label, "label", "", "server name to put in the result line")
	flag.IntVar(&o.n, "n", 600, "burst: calls; freeport: ports to print")
	flag.IntVar(&o.c, "c", 64, "load: concurrent clients")
	flag.DurationVar(&o.d, "d", 5*time.Second, "load: duration")
	flag.IntVar(&o.tenants, "tenants", 10000, "load: distinct descriptor values")
	flag.StringVar(&o.domain, "domain", "bench", "rate limit domain")
	flag.StringVar(&o.key, "key", "tenant", "descriptor entry key")
	flag.StringVar(&o.value, "value", "t", "burst/wait: descriptor entry value; load: value prefix")
	flag.IntVar(&o.conns, "conns", 8, "gRPC connections, used round robin")
	flag.StringVar(&o.redis, "redis", "", "Redis host:port for INFO commandstats (optional)")
	flag.StringVar(&o.metrics, "metrics", "", "ratelimit-rls /metrics URL: report its failed-open decisions (optional)")
	flag.DurationVar(&o.timeout, "timeout", 0, "burst/load: each call's deadline, sent as grpc-timeout (Envoy's filter default: 20ms); 0 for none")
	flag.DurationVar(&o.wait, "wait", 20*time.Second, "wait: give up after; burst/load: the most to wait for the connections")
	flag.Parse()

	var err error
	switch o.mode {
	case "burst":
		err = runBurst(o)
	case "load":
		err = runLoad(o)
	case "wait":
		err = runWait(o)
	case "freeport":
		err = freePorts(o.n)
	default:
		err = fmt.Errorf("unknown -mode %q", o.mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsload:", err)
		os.Exit(1)
	}
}

// dialAll opens n gRPC connections to addr and waits until every one is
// READY, so that a burst measures the server and not connection setup.
func dialAll(addr string, n int, timeout time.Duration) ([]*grpc.ClientConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conns := make([]*grpc.ClientConn, 0, n)
	for i := 0; i < n; i++ {
		cc, err := grpc.NewClient("passthrough:///"+addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeAll(conns)
			return nil, err
		}
		conns = append(conns, cc)
		cc.Connect()
		for st := cc.GetState(); st != connectivity.Ready; st = cc.GetState() {
			if !cc.WaitForStateChange(ctx, st) {
				closeAll(conns)
				return nil, fmt.Errorf("connection %d to %s not ready: %v", i, addr, st)
			}
		}
	}
	return conns, nil
}

// closeAll closes every connection.
func closeAll(conns []*grpc.ClientConn) {
	for _, cc := range conns {
		_ = cc.Close()
	}
}

// request builds a ShouldRateLimit request of one descriptor with one
// entry.
func request(domain, key, value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{
		Domain: domain,
		Descriptors: []*rlv3.RateLimitDescriptor{{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
		}},
	}
}

// measured is what a run of calls changed since baseline, as result
// fields: the failed-open decisions and Redis's commands, once Redis has
// settled.
func measured(o options, before cmdStats, foBefore float64, calls int64) (string, error) {
	redisSettle(o)
	rf, err := redisFields(o.redis, before, calls)
	if err != nil {
		return "", err
	}
	foAfter, err := failedOpen(o.metrics)
	if err != nil {
		return "", err
	}
	return failOpenFields(foBefore, foAfter) + rf, nil
}

// baseline reads what a run is measured from: Redis's command stats
// (-redis) and ratelimit-rls's failed-open decisions (-metrics).
func baseline(o options) (cmdStats, float64, error) {
	before, err := redisBefore(o.redis)
	if err != nil {
		return nil, 0, err
	}
	fo, err := failedOpen(o.metrics)
	return before, fo, err
}

// redisBefore reads the starting command stats, or nil without -redis.
func redisBefore(addr string) (cmdStats, error) {
	if addr == "" {
		return nil, nil
	}
	return readCommandStats(addr)
}

// redisSettle waits, when calls had a deadline, until Redis has seen no
// new command for 200ms (at most 5s): a server may go on working on calls
// that the client has given up on, and their commands belong to this run.
func redisSettle(o options) {
	if o.redis == "" || o.timeout <= 0 {
		return
	}
	total := func() int64 {
		st, err := readCommandStats(o.redis)
		if err != nil {
			return -1
		}
		var n int64
		for name, c := range st {
			if name != "info" {
				n += c
			}
		}
		return n
	}
	last := total()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		time.Sleep(200 * time.Millisecond)
		n := total()
		if n == last {
			return
		}
		last = n
	}
}

// redisFields reads the final command stats and renders the commands
// per call and the per-command breakdown, or "" without -redis.
func redisFields(addr string, before cmdStats, calls int64) (string, error) {
	if addr == "" {
		return "", nil
	}
	after, err := readCommandStats(addr)
	if err != nil {
		return "", err
	}
	ds, total := diffStats(before, after)
	// Redis counts the commands a Lua script calls as well as the
	// EVAL/EVALSHA/FCALL itself, so also report the scripts alone.
	var scripts int64
	for _, d := range ds {
		switch d.name {
		case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
			scripts += d.calls
		}
	}
	per, sper := 0.0, 0.0
	if calls > 0 {
		per = float64(total) / float64(calls)
		sper = float64(scripts) / float64(calls)
	}
	return fmt.Sprintf(" redis_cmds=%d redis_cmds_per_call=%.3f redis_scripts_per_call=%.3f redis_breakdown=%s",
		total, per, sper, formatBreakdown(ds)), nil
}

// runBurst opens o.n calls at once for one descriptor and counts them.
func runBurst(o options) error {
	conns, err := dialAll(o.addr, o.conns, o.wait)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	clients := make([]rlsv3.RateLimitServiceClient, len(conns))
	for i, cc := range conns {
		clients[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	before, foBefore, err := baseline(o)
	if err != nil {
		return err
	}

	var t tally
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	req := request(o.domain, o.key, o.value)
	lat := make([]time.Duration, o.n)
	ready.Add(o.n)
	done.Add(o.n)
	for i := 0; i < o.n; i++ {
		client := clients[i%len(clients)]
		go func(i int) {
			defer done.Done()
			ready.Done()
			<-start
			ctx, cancel := callCtx(o)
			defer cancel()
			t0 := time.Now()
			resp, err := client.ShouldRateLimit(ctx, req)
			lat[i] = time.Since(t0)
			t.record(resp, err)
		}(i)
	}
	ready.Wait()
	began := time.Now()
	close(start)
	done.Wait()
	elapsed := time.Since(began)

	rf, err := measured(o, before, foBefore, int64(o.n))
	if err != nil {
		return err
	}
	sortDurations(lat)
	fmt.Printf("result mode=burst server=%s domain=%s value=%s n=%d timeout_ms=%.1f %s elapsed_ms=%.1f %s%s\n",
		label(o), o.domain, o.value, o.n, ms(o.timeout), t.fields(int64(o.n)), ms(elapsed), latencyFields(lat), rf)
	fmt.Printf("# burst %s: %d of %d allowed, %d over limit, %d deadline exceeded (timeout %s), %d errors: Envoy lets %d through; in %s, p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
		label(o), t.ok.Load(), o.n, t.over.Load(), t.deadline.Load(), o.timeout, t.errs.Load(), t.letThrough(),
		elapsed.Round(time.Millisecond), ms(pct(lat, 0.5)), ms(pct(lat, 0.99)), ms(pct(lat, 1)))
	printFirstErr(&t)
	return nil
}

// runLoad has o.c clients call for o.d and reports throughput and
// latency.
func runLoad(o options) error {
	if o.tenants < 1 || o.c < 1 {
		return fmt.Errorf("-tenants and -c must be positive")
	}
	conns, err := dialAll(o.addr, o.conns, o.wait)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	// Build the requests once so that the client's own work stays small.
	reqs := make([]*rlsv3.RateLimitRequest, o.tenants)
	for i := range reqs {
		reqs[i] = request(o.domain, o.key, fmt.Sprintf("%s%d", o.value, i))
	}
	before, foBefore, err := baseline(o)
	if err != nil {
		return err
	}

	var t tally
	var next atomic.Int64
	lat := make([][]time.Duration, o.c)
	var wg sync.WaitGroup
	began := time.Now()
	deadline := began.Add(o.d)
	for w := 0; w < o.c; w++ {
		client := rlsv3.NewRateLimitServiceClient(conns[w%len(conns)])
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			mine := make([]time.Duration, 0, 1<<14)
			for time.Now().Before(deadline) {
				req := reqs[next.Add(1)%int64(len(reqs))]
				ctx, cancel := callCtx(o)
				t0 := time.Now()
				resp, err := client.ShouldRateLimit(ctx, req)
				mine = append(mine, time.Since(t0))
				cancel()
				t.record(resp, err)
			}
			lat[w] = mine
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(began)

	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sortDurations(all)
	calls := int64(len(all))
	rate := float64(calls) / elapsed.Seconds()
	p50, p99, pmax := pct(all, 0.50), pct(all, 0.99), pct(all, 1)

	rf, err := measured(o, before, foBefore, calls)
	if err != nil {
		return err
	}
	fmt.Printf("result mode=load server=%s domain=%s c=%d tenants=%d timeout_ms=%.1f calls=%d elapsed_s=%.3f calls_per_s=%.0f %s %s%s\n",
		label(o), o.domain, o.c, o.tenants, ms(o.timeout), calls, elapsed.Seconds(), rate,
		latencyFields(all), t.fields(calls), rf)
	fmt.Printf("# load %s: %d calls in %.2fs = %.0f calls/s, p50 %.3f ms, p99 %.3f ms, max %.3f ms; ok %d, over %d, deadline exceeded %d (timeout %s), errors %d\n",
		label(o), calls, elapsed.Seconds(), rate, ms(p50), ms(p99), ms(pmax),
		t.ok.Load(), t.over.Load(), t.deadline.Load(), o.timeout, t.errs.Load())
	if rf != "" {
		fmt.Printf("#%s\n", strings.ReplaceAll(rf, " redis_", " redis "))
	}
	printFirstErr(&t)
	return nil
}

// runWait retries one call until the server answers without error.
func runWait(o options) error {
	deadline := time.Now().Add(o.wait)
	req := request(o.domain, o.key, o.value)
	var last error
	for time.Now().Before(deadline) {
		cc, err := grpc.NewClient("passthrough:///"+o.addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, req)
		cancel()
		_ = cc.Close()
		if err == nil {
			fmt.Printf("# %s answered %s\n", o.addr, resp.GetOverallCode())
			return nil
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer within %s: %v", o.addr, o.wait, last)
}

// freePorts prints n distinct free loopback ports, holding each open
// until all are chosen so that none repeats.
func freePorts(n int) error {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		ls = append(ls, l)
		fmt.Println(l.Addr().(*net.TCPAddr).Port)
	}
	return nil
}

// pct returns the q-quantile of sorted (nearest rank), 0 when empty.
func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

// ms converts d to fractional milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// label is the server name for output, the address when none is given.
func label(o options) string {
	if o.label != "" {
		return o.label
	}
	return o.addr
}

// printFirstErr shows the first error seen, if any.
func printFirstErr(t *tally) {
	if e, ok := t.firstErr.Load().(string); ok {
		fmt.Printf("# first error: %s\n", e)
	}
}
