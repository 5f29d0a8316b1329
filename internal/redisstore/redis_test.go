package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/gatewaykit/ratelimit/store"
)

// The engine's own behaviour on real servers: what its batcher and nodes
// do that a limiter cannot see. The store's contract, on every kind of
// client, is the ratelimit package's (storetest), and so are the failure
// and chaos tests.

func TestMain(m *testing.M) { os.Exit(redistest.Main(m)) }

var keySeq atomic.Int64

// uniqueKey returns a key no other test uses.
func uniqueKey(t *testing.T, what string) string {
	return fmt.Sprintf("rl:redisstore:%s:%s:%d:%d", t.Name(), what, time.Now().UnixNano(), keySeq.Add(1))
}

// take has s decide a request of cost 1 of key, at a limit of 10 per
// width, waiting up to a second.
func take(ctx context.Context, s *Store, key string, width time.Duration) (store.Result, error) {
	now := time.Now()
	r := store.Request{Budget: &store.Budget{Limit: 10, Window: width}, Cost: 1, Now: now, Deadline: now.Add(time.Second)}
	res := store.Result{Counts: make([]store.Count, 1)}
	err := s.Take(ctx, key, &r, &res)
	return res, err
}

// batcherReaches waits, up to timeout, until cond holds of b's state,
// read under b's lock.
func batcherReaches(b *batcher, timeout time.Duration, cond func() bool) error {
	return redistest.Poll(timeout, func() error {
		b.mu.Lock()
		defer b.mu.Unlock()
		if !cond() {
			return errors.New("the batcher is not there yet")
		}
		return nil
	})
}

// Keys of different windows may share a round trip, and one script call:
// each gets its own window. Two keys, of a minute and of 10 s, are made to
// meet in one batch: the server is paused while the batcher's round trips
// are all in flight, so that both calls wait for the next one. Each key's
// expiry on the server, and each answer, must be its own window's.
//
// Only on a single server: a cluster's script call carries one key, so
// keys of different windows never share one there, and a ring's carries
// the keys of one shard, which the test cannot choose.
func TestKeysOfDifferentWindowsInOneScriptCall(t *testing.T) {
	const pause = 500 * time.Millisecond
	// With ContextTimeoutEnabled the store sends through this client
	// itself (see sender), so that its hooks see the script calls.
	opts := redistest.Options(t)
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	calls := &scriptCalls{}
	rdb.AddHook(calls)
	admin := redistest.Client(t)
	ctx := context.Background()
	tenSeconds, minute := uniqueKey(t, "10s"), uniqueKey(t, "1m")
	windows := map[string]time.Duration{tenSeconds: 10 * time.Second, minute: time.Minute}
	s := New(rdb)
	// Every round trip goes out at once, up to rounds, late or not, so
	// that the held ones fill them all.
	s.nodes.first.batch.late = 0
	if _, err := take(ctx, s, uniqueKey(t, "warm"), time.Minute); err != nil { // loads the script, dials
		t.Fatalf("warm-up: %v", err)
	}

	// CLIENT PAUSE holds every client's commands, the admin's too.
	if err := admin.Do(ctx, "client", "pause", pause.Milliseconds()).Err(); err != nil {
		t.Fatal(err)
	}
	b := s.nodes.first.batch
	var wg sync.WaitGroup
	for range rounds {
		wg.Go(func() { take(ctx, s, uniqueKey(t, "held"), time.Minute) })
	}
	held := batcherReaches(b, pause, func() bool { return b.inFlight == rounds })
	results := map[string]*store.Result{tenSeconds: {}, minute: {}}
	var joined error
	for i, key := range []string{tenSeconds, minute} {
		if held != nil || joined != nil {
			break
		}
		wg.Go(func() { *results[key], _ = take(ctx, s, key, windows[key]) })
		joined = batcherReaches(b, pause, func() bool { return b.filling != nil && len(b.filling.ops) == i+1 })
	}
	wg.Wait()
	if held != nil || joined != nil {
		t.Fatalf("the two keys' calls did not wait in one batch while the server was paused: %v; %v", held, joined)
	}
	if !calls.sharedBy(tenSeconds, minute) {
		t.Fatalf("script calls %v; want one that carries both %s and %s", calls.all(), tenSeconds, minute)
	}
	for key, w := range windows {
		c := results[key].Counts[0]
		if !results[key].Allowed || c.Left != w || c.Length != w {
			t.Errorf("a key of a %v window: %+v; want allowed, Left and Length %v", w, *results[key], w)
		}
		ttl, err := admin.PTTL(ctx, key).Result()
		if err != nil || ttl <= w-5*time.Second || ttl > w {
			t.Errorf("PTTL of the key of a %v window: %v, %v; want about %v", w, ttl, err, w)
		}
	}
}

// A caller that gives up before its round trip leaves is not charged, on
// a real server: with every round trip of the store held up (the server
// pauses its clients), a caller whose wait ends in the batch that is
// filling is taken out of it, and its key never counts.
func TestCallerThatLeavesIsNotCharged(t *testing.T) {
	srv, err := redistest.Start(false)
	if err != nil {
		if !redistest.HaveServer() {
			redistest.SkipWithout(t, "redis-server is not on PATH: "+redistest.HowToRun)
		}
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { rdb.Close() })
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	ctx := context.Background()
	s := New(rdb)
	// Every round trip goes out at once, up to rounds, late or not, so
	// that the held ones fill them all.
	s.nodes.first.batch.late = 0
	if _, err := take(ctx, s, "rl:warm", time.Minute); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	// CLIENT PAUSE holds every client's commands, this one's after the
	// pause too, for 400 ms.
	if err := admin.Do(ctx, "client", "pause", 400).Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range rounds {
		wg.Go(func() { take(ctx, s, "rl:held-"+strconv.Itoa(i), time.Minute) })
	}
	time.Sleep(50 * time.Millisecond) // the held round trips are out
	leave, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, leftErr := take(leave, s, "rl:leaves", time.Minute)
	stay, stayErr := take(ctx, s, "rl:stays", time.Minute)
	wg.Wait()
	if leftErr == nil {
		t.Fatal("the caller that left got an answer; want its deadline's error")
	}
	if stayErr != nil || !stay.Allowed {
		t.Fatalf("a caller that stayed: %+v, %v; want counted", stay, stayErr)
	}
	if n, err := admin.Exists(ctx, "rl:leaves").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS rl:leaves = %d, %v; want 0: the caller that left was charged", n, err)
	}
	if n, err := admin.Get(ctx, "rl:stays").Int(); err != nil || n != 1 {
		t.Fatalf("GET rl:stays = %d, %v; want 1", n, err)
	}
}

// On a single server, the round trips go through the user's client, its
// options left as they were; a lone call makes its round trip on its own
// goroutine only when the client puts deadlines on the socket.
func TestSendsThroughTheUsersClient(t *testing.T) {
	for _, tc := range []struct {
		name   string
		set    func(*redis.Options)
		inline bool
	}{
		{"default options", func(*redis.Options) {}, false},
		{"ContextTimeoutEnabled", func(o *redis.Options) { o.ContextTimeoutEnabled = true }, true},
		{"ContextTimeoutEnabled, ReadTimeout -2", func(o *redis.Options) {
			o.ContextTimeoutEnabled, o.ReadTimeout = true, -2
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := redistest.Options(t)
			tc.set(opts)
			rdb := redis.NewClient(opts)
			t.Cleanup(func() { rdb.Close() })
			before := *rdb.Options()
			calls := &scriptCalls{}
			rdb.AddHook(calls)
			s := New(rdb)
			if inline := s.nodes.first.batch.inline; inline != tc.inline {
				t.Errorf("a lone call makes its own round trip: %v, want %v", inline, tc.inline)
			}
			key := uniqueKey(t, "incr")
			for i := range 2 {
				// The first call may find the script not loaded yet: an
				// EVALSHA, then an EVAL.
				before := calls.count()
				if n, err := s.Incr(context.Background(), key, time.Minute); n != int64(i+1) || err != nil {
					t.Fatalf("Incr = %d, %v; want %d", n, err, i+1)
				}
				if saw := calls.count() - before; saw < 1 || i == 1 && saw != 1 {
					t.Errorf("call %d: the client's hook saw %d script calls, want one (or two for the first)", i+1, saw)
				}
			}
			if got := *rdb.Options(); got.ContextTimeoutEnabled != before.ContextTimeoutEnabled ||
				got.ReadTimeout != before.ReadTimeout || got.WriteTimeout != before.WriteTimeout {
				t.Errorf("the user's client's options changed: ContextTimeoutEnabled %v, ReadTimeout %v, WriteTimeout %v; were %v, %v, %v",
					got.ContextTimeoutEnabled, got.ReadTimeout, got.WriteTimeout,
					before.ContextTimeoutEnabled, before.ReadTimeout, before.WriteTimeout)
			}
		})
	}
}

// A dial that fails ends at once, with its error, the round trips that
// wait on its node, rather than after go-redis's retries (here 5, 5 s
// apart, each past the call's deadline): also once the client of the
// node's server is replaced at the same address, as a ring replaces a
// shard removed and added back (and a cluster client a node it had
// dropped). The node's dial watch is hooked into each client of its
// server. On a ring of one shard at an address nobody listens on.
func TestDialWatchFollowsAReplacedClient(t *testing.T) {
	addr, other := redistest.ClosedAddr(t), redistest.ClosedAddr(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}, MaxRetries: -1,
		DialerRetries: 5, DialerRetryTimeout: 5 * time.Second, HeartbeatFrequency: time.Hour}) // no shard marked down
	t.Cleanup(func() { ring.Close() })
	s := New(ring)
	key := uniqueKey(t, "dial")
	refused := func(what string) {
		t.Helper()
		_, err := take(context.Background(), s, key, time.Minute) // a deadline a second away
		if !errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: %v; want the refused dial's error at once, not the deadline's", what, err)
		}
	}
	refused("the first client")
	first, err := ring.GetShardClientForKey(key)
	if err != nil {
		t.Fatal(err)
	}
	ring.SetAddrs(map[string]string{"b": other})
	ring.SetAddrs(map[string]string{"a": addr})
	if c, err := ring.GetShardClientForKey(key); err != nil || c == first {
		t.Fatalf("the shard's client after it was removed and added back: %v; want a new one", err)
	}
	refused("the client that replaced it")
}

// scriptCalls is a go-redis hook that records the keys of each script call
// (EVALSHA or EVAL) its client sends.
type scriptCalls struct {
	mu   sync.Mutex
	keys [][]string
}

func (s *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.record(cmd)
		return next(ctx, cmd)
	}
}

func (s *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			s.record(cmd)
		}
		return next(ctx, cmds)
	}
}

func (s *scriptCalls) record(cmd redis.Cmder) {
	if name := cmd.Name(); name != "fcall" && name != "evalsha" && name != "eval" {
		return
	}
	args := cmd.Args()
	n, _ := args[2].(int)
	keys := make([]string, 0, n)
	for _, k := range args[3 : 3+n] {
		keys = append(keys, fmt.Sprint(k))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append(s.keys, keys)
}

func (s *scriptCalls) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

func (s *scriptCalls) all() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.keys)
}

// sharedBy reports whether one script call carried exactly keys, in order.
func (s *scriptCalls) sharedBy(keys ...string) bool {
	return slices.ContainsFunc(s.all(), func(call []string) bool { return slices.Equal(call, keys) })
}
