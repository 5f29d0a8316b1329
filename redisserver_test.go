package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Redis tests run against real redis-server processes, never a mock:
// what they check (atomicity, expiry, the answers of an old server) is the
// server's behaviour. TEST_REDIS_URL and TEST_REDIS_CLUSTER_ADDRS point them
// at servers of your own; otherwise they start their own on loopback ports,
// once per test binary, and TestMain stops them. Whichever redis-server is
// first on PATH runs: `make test-servers` puts each server of
// scripts/redis-servers.sh there in turn.
//
// Without a server they skip, saying how to get one, unless
// RATELIMIT_REQUIRE_REDIS is set (`make test` sets it): then they fail, so
// that a run that was meant to test Redis cannot pass without it.

const (
	// serverStartTimeout bounds every wait for a server or a cluster.
	serverStartTimeout = 10 * time.Second

	howToRunRedisTests = "install redis-server (e.g. apt-get install redis-server), " +
		"run `make test`, which fetches one, or set TEST_REDIS_URL=redis://host:port/0"
	howToRunClusterTests = "install redis-server (e.g. apt-get install redis-server), " +
		"run `make test`, which fetches one, or set TEST_REDIS_CLUSTER_ADDRS=host:port,host:port,host:port"

	// requireRedisEnv turns the skips for a missing server into failures.
	requireRedisEnv = "RATELIMIT_REQUIRE_REDIS"
)

func TestMain(m *testing.M) {
	code := m.Run()
	// A test that fails still returns here; one that panics does not, which
	// is what killWithParent is for.
	stopRedisServers()
	startedServers.Lock()
	server := startedServers.server
	startedServers.Unlock()
	if server != "" {
		// go test shows it, as any output, when the package fails or
		// with -v.
		fmt.Printf("redis-server used by these tests: %s\n", server)
	}
	os.Exit(code)
}

// skipWithoutServer skips t because no server is available, or fails it
// when RATELIMIT_REQUIRE_REDIS is set.
func skipWithoutServer(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv(requireRedisEnv) != "" {
		t.Fatal(msg + " (" + requireRedisEnv + " is set, so this fails instead of skipping)")
	}
	t.Skip(msg)
}

// redisServer is a redis-server process started by this test binary.
type redisServer struct {
	addr   string
	dir    string // the server's working directory, log and cluster config
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has been waited for
}

// startedServers is every server started, for TestMain to stop, and which
// server software they run, for TestMain to tell.
var startedServers struct {
	sync.Mutex
	list   []*redisServer
	server string // describeServer of the first one to answer
}

func stopRedisServers() {
	startedServers.Lock()
	defer startedServers.Unlock()
	for _, s := range startedServers.list {
		s.stop()
	}
	startedServers.list = nil
}

// stop kills the server and removes its directory. Nothing is persisted, so
// there is nothing to shut down gracefully. Safe to call more than once.
func (s *redisServer) stop() {
	_ = s.cmd.Process.Kill()
	<-s.exited
	_ = os.RemoveAll(s.dir)
}

// log returns the end of the server's log, for failure messages.
func (s *redisServer) log() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// skipIfShort skips a test that needs Redis under -short, which is how
// `make test-unit` runs only the tests that need none.
func skipIfShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Redis: skipped under -short")
	}
}

func haveRedisServer() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// startRedisServer starts a redis-server on a free loopback port and waits
// until it answers. A port found free can be taken before the server binds
// it; that failure is retried on another port.
func startRedisServer(cluster bool) (*redisServer, error) {
	var lastErr error
	for range 3 {
		s, portTaken, err := startRedisServerOnce(cluster)
		if err == nil || !portTaken {
			return s, err
		}
		lastErr = err
	}
	return nil, lastErr
}

func startRedisServerOnce(cluster bool) (s *redisServer, portTaken bool, err error) {
	port, err := freePort(cluster)
	if err != nil {
		return nil, false, err
	}
	return startRedisServerOn(port, cluster)
}

// startRedisServerOn starts a redis-server on port with extra arguments and
// waits until it answers. portTaken reports a port another process holds.
func startRedisServerOn(port int, cluster bool, extraArgs ...string) (s *redisServer, portTaken bool, err error) {
	dir, err := os.MkdirTemp("", "ratelimit-redis-")
	if err != nil {
		return nil, false, err
	}
	logFile, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, false, err
	}
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
	}
	if cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"))
	}
	cmd := exec.Command("redis-server", append(args, extraArgs...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	killWithParent(cmd)
	err = cmd.Start()
	logFile.Close() // the server has its own copy
	if err != nil {
		os.RemoveAll(dir)
		return nil, false, fmt.Errorf("start redis-server: %w", err)
	}
	s = &redisServer{
		addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		dir:    dir,
		cmd:    cmd,
		exited: make(chan struct{}),
	}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	startedServers.Lock()
	startedServers.list = append(startedServers.list, s)
	startedServers.Unlock()

	if err := s.waitReady(); err != nil {
		log := s.log()
		s.stop()
		return nil, strings.Contains(log, "Address already in use"),
			fmt.Errorf("redis-server on %s did not come up: %w\nserver log:\n%s", s.addr, err, log)
	}
	return s, false, nil
}

// freePort returns a loopback port that was free a moment ago. A cluster
// node also listens on port+10000 for its bus, so that one must be free too.
func freePort(cluster bool) (int, error) {
	for range 50 {
		port, err := listenAndClose(0)
		if err != nil {
			return 0, err
		}
		if !cluster {
			return port, nil
		}
		if port+10000 <= 65535 {
			if _, err := listenAndClose(port + 10000); err == nil {
				return port, nil
			}
		}
	}
	return 0, errors.New("found no free loopback port for a cluster node and its bus")
}

func listenAndClose(port int) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// killWithParent asks the kernel to kill the server when the test binary
// dies without reaching TestMain's cleanup (a panic, a -timeout). Pdeathsig
// exists only on Linux and FreeBSD; it is set by name so that this file
// still builds everywhere else.
func killWithParent(cmd *exec.Cmd) {
	attr := &syscall.SysProcAttr{}
	if f := reflect.ValueOf(attr).Elem().FieldByName("Pdeathsig"); f.IsValid() {
		f.Set(reflect.ValueOf(syscall.SIGKILL))
	}
	cmd.SysProcAttr = attr
}

// waitReady waits until the server answers PING, and fails early when it
// exits (a taken port does that).
func (s *redisServer) waitReady() error {
	var info string
	err := poll(serverStartTimeout, func() error {
		select {
		case <-s.exited:
			return errServerExited
		default:
		}
		var err error
		info, err = pingOwnServer(s.addr, s.cmd.Process.Pid)
		return err
	})
	if errors.Is(err, errServerExited) {
		return fmt.Errorf("redis-server exited: %v", s.cmd.ProcessState)
	}
	if err == nil {
		startedServers.Lock()
		if startedServers.server == "" {
			startedServers.server = describeServer(info)
		}
		startedServers.Unlock()
	}
	return err
}

// describeServer names the server software from its INFO server section:
// its name (Valkey says server_name:valkey), its own version, and the
// Redis version it claims to match when that differs, and the executable.
func describeServer(info string) string {
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = v
		}
	}
	name, version := "redis", fields["redis_version"]
	if n := fields["server_name"]; n != "" {
		name = n
	}
	if v := fields[name+"_version"]; v != "" && v != version {
		version = v + " (redis_version " + fields["redis_version"] + ")"
	}
	desc := name + " " + version
	if exe := fields["executable"]; exe != "" {
		desc += ", " + exe
	}
	return desc
}

var errServerExited = errors.New("redis-server exited")

// pingOwnServer checks that addr answers PING and is served by process pid:
// another process may have taken the port first and answer in its place. It
// returns the server's INFO server section.
func pingOwnServer(addr string, pid int) (string, error) {
	// Dial first: go-redis logs every failed dial, and until the server
	// listens every dial fails.
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return "", err
	}
	conn.Close()
	// A fresh client each time: a pool that failed to dial keeps failing
	// for a while without dialling.
	rdb := redis.NewClient(&redis.Options{
		Addr:               addr,
		DialTimeout:        200 * time.Millisecond,
		DialerRetries:      1,
		DialerRetryTimeout: time.Millisecond,
		// Short, so that a port held by a process that never answers costs
		// little: the connection's handshake does not watch ctx.
		ReadTimeout:  500 * time.Millisecond,
		WriteTimeout: 500 * time.Millisecond,
		MaxRetries:   -1,
	})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return "", err
	}
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	if !strings.Contains(info, fmt.Sprintf("process_id:%d\r\n", pid)) {
		return "", fmt.Errorf("%s is answered by another process than redis-server %d", addr, pid)
	}
	return info, nil
}

// poll calls check until it returns nil or timeout has passed, and then
// returns check's last error. errServerExited ends it at once: waiting on
// for a dead server only delays its log.
func poll(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if errors.Is(err, errServerExited) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after %v: %w", timeout.Round(time.Millisecond), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// lazyServer is a single node started by the first test that needs it and
// shared by every test after.
type lazyServer struct {
	once sync.Once
	srv  *redisServer
	err  error
}

func (l *lazyServer) get(t testing.TB) *redisServer {
	t.Helper()
	if !haveRedisServer() {
		skipWithoutServer(t, "redis-server is not on PATH: "+howToRunRedisTests)
	}
	l.once.Do(func() { l.srv, l.err = startRedisServer(false) })
	if l.err != nil {
		t.Fatal(l.err)
	}
	return l.srv
}

var (
	singleServer lazyServer
	// ringServer is the ring's second shard; the first is singleServer.
	ringServer lazyServer
)

// redisURL returns the URL of the single-node server the tests share.
func redisURL(t testing.TB) string {
	t.Helper()
	skipIfShort(t)
	if u := os.Getenv("TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://" + singleServer.get(t).addr + "/0"
}

func redisOptions(t testing.TB) *redis.Options {
	t.Helper()
	opt, err := redis.ParseURL(redisURL(t))
	if err != nil {
		t.Fatalf("TEST_REDIS_URL: %v", err)
	}
	return opt
}

// newRedisClient returns a client of the shared single node with a pool of
// its own, closed when the test ends.
func newRedisClient(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(redisOptions(t))
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// newRingClient returns a ring of two shards, closed when the test ends: the
// shared single node and a second server. With TEST_REDIS_URL the second
// shard is a second name for the same server, which may want credentials
// that a server started here would not know; the ring's client code runs
// all the same.
func newRingClient(t *testing.T) *redis.Ring {
	t.Helper()
	ring := redis.NewRing(ringOptions(t))
	t.Cleanup(func() { ring.Close() })
	return ring
}

// ringOptions are newRingClient's options.
func ringOptions(t testing.TB) *redis.RingOptions {
	t.Helper()
	opt := redisOptions(t)
	second := opt.Addr
	if os.Getenv("TEST_REDIS_URL") == "" {
		second = ringServer.get(t).addr
	}
	return &redis.RingOptions{
		Addrs:     map[string]string{"a": opt.Addr, "b": second},
		Username:  opt.Username,
		Password:  opt.Password,
		DB:        opt.DB,
		TLSConfig: opt.TLSConfig,
	}
}

// newClusterClient returns a client of a three-master Redis Cluster, closed
// when the test ends.
func newClusterClient(t *testing.T) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: clusterAddrs(t)})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

var testCluster struct {
	once  sync.Once
	addrs []string
	err   error
}

func clusterAddrs(t *testing.T) []string {
	t.Helper()
	skipIfShort(t)
	if env := os.Getenv("TEST_REDIS_CLUSTER_ADDRS"); env != "" {
		addrs := strings.Split(env, ",")
		for i := range addrs {
			addrs[i] = strings.TrimSpace(addrs[i])
		}
		return addrs
	}
	if !haveRedisServer() {
		skipWithoutServer(t, "the cluster tests start their own cluster and redis-server is not on PATH: "+howToRunClusterTests)
	}
	testCluster.once.Do(func() { testCluster.addrs, testCluster.err = startRedisCluster() })
	if testCluster.err != nil {
		t.Fatal(testCluster.err)
	}
	return testCluster.addrs
}

// clusterSlots splits the 16384 hash slots between the three masters.
var clusterSlots = [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}

// slotRange lists the slots lo to hi. CLUSTER ADDSLOTS takes them one by
// one: CLUSTER ADDSLOTSRANGE is Redis 7.0 and later, and the tests run on
// Redis 6 too.
func slotRange(lo, hi int) []int {
	slots := make([]int, 0, hi-lo+1)
	for slot := lo; slot <= hi; slot++ {
		slots = append(slots, slot)
	}
	return slots
}

// startRedisCluster starts three masters without replicas, gives each a
// third of the slots, joins them and waits until a cluster client can use
// every third.
func startRedisCluster() ([]string, error) {
	ctx := context.Background()
	var nodes []*redisServer
	var addrs []string
	var clients []*redis.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for _, slots := range clusterSlots {
		s, err := startRedisServer(true)
		if err != nil {
			return nil, err
		}
		c := redis.NewClient(&redis.Options{Addr: s.addr})
		nodes, addrs, clients = append(nodes, s), append(addrs, s.addr), append(clients, c)
		if err := c.ClusterAddSlots(ctx, slotRange(slots[0], slots[1])...).Err(); err != nil {
			return nil, fmt.Errorf("CLUSTER ADDSLOTS %d-%d on %s: %w", slots[0], slots[1], s.addr, err)
		}
	}
	// Every node meets every other: meeting one node and waiting for
	// gossip to introduce the rest takes seconds longer, and varies.
	for i, c := range clients {
		for _, s := range nodes[i+1:] {
			host, port, _ := net.SplitHostPort(s.addr)
			if err := c.ClusterMeet(ctx, host, port).Err(); err != nil {
				return nil, fmt.Errorf("CLUSTER MEET %s from %s: %w", s.addr, nodes[i].addr, err)
			}
		}
	}

	// One deadline for the whole wait, as the nodes converge together. A
	// new master holds back cluster_state:ok for its first 2 s, so the
	// wait takes about that long.
	deadline := time.Now().Add(serverStartTimeout)
	for i, c := range clients {
		err := poll(time.Until(deadline), func() error {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("CLUSTER INFO says:\n%s", info)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("cluster node %s is not ok: %w\nserver log:\n%s", nodes[i].addr, err, nodes[i].log())
		}
	}

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	for i, slots := range clusterSlots {
		key, err := keyInSlots(ctx, clients[0], slots[0], slots[1])
		if err != nil {
			return nil, err
		}
		err = poll(time.Until(deadline), func() error {
			if err := cc.Set(ctx, key, "ok", 0).Err(); err != nil {
				return err
			}
			if v, err := cc.Get(ctx, key).Result(); err != nil || v != "ok" {
				return fmt.Errorf("GET %s = %q, %v; want \"ok\"", key, v, err)
			}
			return cc.Del(ctx, key).Err()
		})
		if err != nil {
			return nil, fmt.Errorf("cluster client cannot use slots %d-%d of %s: %w\nserver log:\n%s",
				slots[0], slots[1], nodes[i].addr, err, nodes[i].log())
		}
	}
	return addrs, nil
}

// keyInSlots returns a key whose hash slot is in [lo, hi], as the server
// computes it.
func keyInSlots(ctx context.Context, node *redis.Client, lo, hi int) (string, error) {
	for i := range 1000 {
		key := "cluster-check:" + strconv.Itoa(i)
		slot, err := node.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			return "", fmt.Errorf("CLUSTER KEYSLOT %s: %w", key, err)
		}
		if int(slot) >= lo && int(slot) <= hi {
			return key, nil
		}
	}
	return "", fmt.Errorf("no key found in slots %d-%d", lo, hi)
}
