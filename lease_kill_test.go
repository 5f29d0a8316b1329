package ratelimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/gatewaykit/ratelimit/store"
)

// A replica killed with SIGKILL while it holds a block of a tenant's
// budget (Options.Leases), on real Redis: a single node and a cluster.
// The replica is a child process, this test binary run again with
// leaseKillEnv set; it makes the tenant hot, claims a block, says what it
// allowed and what the store counted, and waits to be killed.

// leaseKillEnv holds the child's work: "single|<url>" or
// "cluster|<addr>,<addr>,...", then "|<tenant>|<limit>|<window>".
const leaseKillEnv = "RATELIMIT_LEASE_KILL_CHILD"

// leaseKillClient is a client of the servers that target names: kind
// "single" a URL, "cluster" addresses, comma-separated.
func leaseKillClient(kind, target string) (redis.UniversalClient, error) {
	if kind == "cluster" {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(target, ",")}), nil
	}
	opt, err := redis.ParseURL(target)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opt), nil
}

// leaseKillOptions are the options of every replica, the child's and the
// parent's: a fixed window, which Redis starts at the window's first
// request and ends on its own clock; failing closed, so that a store
// error never passes for an allowed request, and with a StoreTimeout that
// is about counting, not time, under -race on a busy machine.
func leaseKillOptions(limit int, w time.Duration, c store.Store) Options {
	return Options{Limit: limit, Window: w, Counter: c, Leases: true, FailClosed: true,
		StoreTimeout: 5 * time.Second, Metrics: &Metrics{}, Logger: newLogRecorder().logger()}
}

// The units of a block that its replica never spent are lost when the
// replica dies, for that window only: the store counted the whole block
// when it was claimed, so the replicas still alive together allow exactly
// the limit less what the store counted before the kill, never more than
// the limit with what the dead one allowed; and the next window is
// whole, the dead replica's block having died with its window.
func TestLeasesOfAKilledReplica(t *testing.T) {
	if os.Getenv(leaseKillEnv) != "" {
		t.Skip("the child's own run")
	}
	// 2 s: long enough for the child's warm-up, the kill and a burst
	// (checked below), short enough to wait for the next window. The
	// limit leaves room for the child's requests before its tenant is
	// hot, which the store decides one by one.
	const limit, w = 400, 2 * time.Second
	for _, s := range []struct {
		kind   string
		target func(t *testing.T) string
	}{
		{"single", func(t *testing.T) string { return redistest.URL(t) }},
		{"cluster", func(t *testing.T) string { return strings.Join(clusterAddrs(t), ",") }},
	} {
		t.Run(s.kind, func(t *testing.T) {
			target := s.target(t)
			tenant := uniqueTenant(t)
			// The living replicas are ready before the child starts, so
			// that the window, which the child's first request opens,
			// is not spent on their connections.
			var lims []*Limiter
			for range 2 {
				rdb, err := leaseKillClient(s.kind, target)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { rdb.Close() })
				lim := NewLimiter(leaseKillOptions(limit, w, NewRedisCounter(rdb)))
				if err := lim.Ping(context.Background()); err != nil {
					t.Fatal(err)
				}
				lims = append(lims, lim)
			}

			held := runLeaseKillChild(t, fmt.Sprintf("%s|%s|%s|%d|%v", s.kind, target, tenant, limit, w))
			t.Logf("the child allowed %d, the store counted %d, its block was %d units (%d blocks), %d of them unspent at the kill",
				held.allowed, held.counted, held.claimed, held.blocks, held.counted-held.allowed)

			// The store counted the child's whole block, at its claim:
			// it counts what the child's store counted (the requests it
			// allowed one by one, and the block), which is more than the
			// child allowed by the units it held unspent. The request
			// that claimed the block spent at least one unit of it, and
			// the other goroutines' at most one each.
			ctx := context.Background()
			u, err := lims[0].Usage(ctx, tenant)
			if err != nil {
				t.Fatal(err)
			}
			end := time.Now().Add(u[0].Reset)
			t.Logf("the window has %v left after the kill", u[0].Reset)
			if u[0].Used != held.counted {
				t.Fatalf("after the kill the store counts %d; want the %d the child's store counted, its whole block of %d included",
					u[0].Used, held.counted, held.claimed)
			}
			if unspent := held.counted - held.allowed; unspent < 1 || unspent > held.claimed-1 {
				t.Fatalf("the child allowed %d of the %d its store counted: %d unspent; want between 1 and its block's %d - 1",
					held.allowed, held.counted, unspent, held.claimed)
			}

			// Both living replicas send the limit at once: each has more
			// requests than the window has left, so each spends every
			// block it claims to the last unit, and the store refuses
			// what goes past it. They allow exactly what the store has
			// left, limit - counted: the child's unspent units are not
			// theirs to spend.
			start := time.Now()
			decided, allowed := burstAtOnce(lims, tenant, 2*limit)
			if late := time.Since(end); late > -100*time.Millisecond {
				t.Fatalf("the burst took %v and ended %v before the window did (want at least 100 ms): too slow a run to tell this window from the next", time.Since(start), -late)
			}
			firstBlocks, _, _ := leaseCounts(lims)
			t.Logf("in the same window: the living replicas allowed %d of %d in %v, claiming %d blocks", allowed, 2*limit, time.Since(start), firstBlocks)
			if decided != 2*limit || allowed != int64(limit-held.counted) {
				t.Fatalf("%d of %d decided by the store or a block, %d allowed; want all decided, exactly %d - %d = %d allowed",
					decided, 2*limit, allowed, limit, held.counted, limit-held.counted)
			}
			if firstBlocks == 0 {
				t.Fatal("the living replicas claimed no block: the test tested nothing of leases in the dead replica's window")
			}
			if total := int64(held.allowed) + allowed; total > limit {
				t.Fatalf("the child allowed %d and the living replicas %d: %d in one window; want at most %d", held.allowed, allowed, total, limit)
			}
			if u, err := lims[1].Usage(ctx, tenant); err != nil || u[0].Used != limit {
				t.Fatalf("after the burst Usage = %+v, %v; want %d used", u, err, limit)
			}

			// The next window is whole: the child's block died with the
			// window it was counted in. (Whether the replicas claim
			// blocks in it is theirs to say: each measures the tenant's
			// rate over at least 50 ms, the idle spell before included,
			// which a burst of this length may not outlast.)
			time.Sleep(time.Until(end.Add(250 * time.Millisecond)))
			decided, allowed = burstAtOnce(lims, tenant, 2*limit)
			blocks, given, expired := leaseCounts(lims)
			t.Logf("the next window: %d of %d allowed, claiming %d blocks; in both windows %d units given back, %d expired", allowed, 2*limit, blocks-firstBlocks, given, expired)
			if decided != 2*limit || allowed != limit {
				t.Fatalf("the next window: %d of %d decided, %d allowed; want all decided, exactly %d allowed", decided, 2*limit, allowed, limit)
			}
			if u, err := lims[0].Usage(ctx, tenant); err != nil || u[0].Used != limit {
				t.Fatalf("after the next window's burst Usage = %+v, %v; want %d used", u, err, limit)
			}
		})
	}
}

// leaseKillHeld is what the child says once it holds a block.
type leaseKillHeld struct {
	allowed int // requests it allowed, one unit each
	counted int // units its store counted: those allowed one by one, and its block
	claimed int // the block's size
	blocks  uint64
}

// runLeaseKillChild starts the child with env, waits for it to hold a
// block, kills it with SIGKILL, and returns what it said.
func runLeaseKillChild(t *testing.T, env string) leaseKillHeld {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^TestLeasesKilledReplicaChild$", "-test.v")
	child.Env = append(os.Environ(), leaseKillEnv+"="+env)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	kill := sync.OnceFunc(func() {
		// SIGKILL: the child gives back nothing, as a replica that the
		// kernel ends at once.
		if err := child.Process.Kill(); err != nil {
			t.Errorf("kill the child: %v", err)
		}
		_ = child.Wait()
		go func() { // the scanner's end, so that it never blocks
			for range lines {
			}
		}()
	})
	defer kill()
	var said []string // the child's other lines, for a failure
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the child ended before it held a block, saying:\n%s", strings.Join(said, "\n"))
			}
			var h leaseKillHeld
			if _, err := fmt.Sscanf(line, "holding: allowed %d counted %d claimed %d blocks %d", &h.allowed, &h.counted, &h.claimed, &h.blocks); err != nil {
				said = append(said, line)
				continue
			}
			kill()
			if h.blocks < 1 || h.claimed < 2 || h.allowed < 1 {
				t.Fatalf("the child says %q; want a block of at least 2 units claimed", line)
			}
			return h
		case <-timeout:
			t.Fatalf("the child never held a block in 60 s, saying:\n%s", strings.Join(said, "\n"))
		}
	}
}

// TestLeasesKilledReplicaChild is the replica that TestLeasesOfAKilledReplica
// kills. Eight goroutines send the tenant's requests, each one after
// another, until one of them claims a block (the tenant is hot once 8
// units come within 10 ms); then each stops after the request it has in
// flight, which its block decides, or the store turns away. The child
// says what it allowed and what its store counted, and waits.
func TestLeasesKilledReplicaChild(t *testing.T) {
	env := os.Getenv(leaseKillEnv)
	if env == "" {
		t.Skip("run by TestLeasesOfAKilledReplica")
	}
	parts := strings.Split(env, "|")
	limit, err := strconv.Atoi(parts[3])
	if err != nil {
		t.Fatal(err)
	}
	w, err := time.ParseDuration(parts[4])
	if err != nil {
		t.Fatal(err)
	}
	rdb, err := leaseKillClient(parts[0], parts[1])
	if err != nil {
		t.Fatal(err)
	}
	store := &leaseKillStore{Store: NewRedisCounter(rdb), tenant: parts[2]}
	opts := leaseKillOptions(limit, w, store)
	lim := NewLimiter(opts)
	ctx := context.Background()
	if err := lim.Ping(ctx); err != nil {
		fmt.Printf("child: ping: %v\n", err)
		return
	}
	var allowed atomic.Int64
	var failed atomic.Pointer[string]
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for !store.held.Load() {
				d := lim.Take(ctx, parts[2])
				// After the claim, a request the store turned away
				// fails, closed; before it, nothing may fail, and a
				// refusal means the limit came before a block.
				if d.Allowed {
					allowed.Add(1)
				} else if !store.held.Load() {
					why := fmt.Sprintf("child: refused (%v) after %d allowed, before a block was claimed", d.Err, allowed.Load())
					failed.CompareAndSwap(nil, &why)
					return
				}
			}
		})
	}
	wg.Wait()
	if why := failed.Load(); why != nil {
		fmt.Println(*why)
		return
	}
	fmt.Printf("holding: allowed %d counted %d claimed %d blocks %d\n",
		allowed.Load(), store.counted.Load(), store.claimed.Load(), opts.Metrics.Snapshot().LeaseBlocks)
	time.Sleep(time.Minute)
}

// errLeaseKillHeld is what the child's store answers after the claim.
var errLeaseKillHeld = errors.New("the replica holds its block until it is killed")

// leaseKillStore is the child's store: a RedisCounter that turns away
// every call after the first claim it allowed, before it reaches Redis.
// A live replica gives back what is left of a block that nothing spent
// from for lease.IdleAfter (50 ms); one killed within those 50 ms gives
// back nothing, but the kill cannot be timed to them on a busy machine.
// Turning the calls away stands for them: the block stays held, its rest
// unspent, until the SIGKILL. The child's requests of its tenant cost 1
// each, so the claim is the first Take of a greater cost.
type leaseKillStore struct {
	store.Store
	tenant  string // whose units counted counts (not Ping's probe)
	held    atomic.Bool
	counted atomic.Int64 // units of the tenant the store allowed
	claimed atomic.Int64 // the claim's size
}

func (s *leaseKillStore) Take(ctx context.Context, r *store.Request, res *store.Result) error {
	if s.held.Load() {
		return errLeaseKillHeld
	}
	err := s.Store.Take(ctx, r, res)
	if err == nil && res.Allowed && r.Tenant == s.tenant {
		s.counted.Add(r.Cost)
		if r.Cost > 1 {
			s.claimed.Store(r.Cost)
			s.held.Store(true)
		}
	}
	return err
}

func (s *leaseKillStore) Give(ctx context.Context, r *store.Request, marks store.Marks) error {
	if s.held.Load() {
		return errLeaseKillHeld
	}
	return s.Store.Give(ctx, r, marks)
}
