// Package redistest starts real redis-server processes for tests, and hands
// out clients of them.
//
// The Redis tests run against real servers, never a mock: what they check
// (atomicity, expiry, the answers of an old server) is the server's
// behaviour. TEST_REDIS_URL and TEST_REDIS_CLUSTER_ADDRS point them at
// servers of your own; otherwise they start their own on loopback ports,
// once per test binary, and [Main] stops them. Whichever redis-server is
// first on PATH runs: `make test-servers` puts each server of
// scripts/redis-servers.sh there in turn.
//
// Without a server the tests skip, saying how to get one, unless
// RATELIMIT_REQUIRE_REDIS is set (`make test` sets it): then they fail, so
// that a run that was meant to test Redis cannot pass without it.
//
// It is a normal package rather than a _test.go file so that every test
// package of the repository, nested modules included, can share it.
package redistest

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
	"github.com/redis/go-redis/v9/logging"
)

const (
	// HowToRun tells the user how to get a server for the single-node
	// tests; skip messages end with it.
	HowToRun = "install redis-server (e.g. apt-get install redis-server), " +
		"run `make test`, which fetches one, or set TEST_REDIS_URL=redis://host:port/0"
	// HowToRunCluster is HowToRun for the cluster tests.
	HowToRunCluster = "install redis-server (e.g. apt-get install redis-server), " +
		"run `make test`, which fetches one, or set TEST_REDIS_CLUSTER_ADDRS=host:port,host:port,host:port"

	// RequireEnv is the environment variable that turns the skips for a
	// missing server into failures.
	RequireEnv = "RATELIMIT_REQUIRE_REDIS"

	// startTimeout bounds every wait for a server or a cluster.
	startTimeout = 10 * time.Second
)

// Main runs the tests of m, stops every server this process started, prints
// which server software they ran, and returns m's exit code. A TestMain
// calls it as os.Exit(redistest.Main(m)). go-redis's own logger is off:
// the tests kill and black-hole servers on purpose, and its hundreds of
// "failed to dial" lines would bury the one line that says what failed.
// A test that reads go-redis's lines sets a logger of its own
// (redis.SetLogger), and Quiet again when it is done.
func Main(m *testing.M) int {
	Quiet()
	code := m.Run()
	// A test that fails still returns here; one that panics does not, which
	// is what killWithParent is for.
	StopAll()
	started.Lock()
	server := started.server
	started.Unlock()
	if server != "" {
		// go test shows it, as any output, when the package fails or
		// with -v.
		fmt.Printf("redis-server used by these tests: %s\n", server)
	}
	return code
}

// Quiet turns go-redis's own logger off (see Main).
func Quiet() { logging.Disable() }

// StopAll stops every server this process started. Servers started later
// are stopped by the next call.
func StopAll() {
	started.Lock()
	defer started.Unlock()
	for _, s := range started.list {
		s.Stop()
	}
	started.list = nil
}

// SkipWithout skips t because no server is available, with msg as the
// reason, or fails it when RATELIMIT_REQUIRE_REDIS is set.
func SkipWithout(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv(RequireEnv) != "" {
		t.Fatal(msg + " (" + RequireEnv + " is set, so this fails instead of skipping)")
	}
	t.Skip(msg)
}

// SkipIfShort skips t under -short, which is how `make test-unit` runs
// only the tests that need no Redis.
func SkipIfShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Redis: skipped under -short")
	}
}

// HaveServer reports whether redis-server is on PATH, so that this package
// can start servers.
func HaveServer() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// Server is a redis-server process started by this package. It persists
// nothing, and lives until Stop, StopAll or Main stops it.
type Server struct {
	addr   string
	dir    string // the server's working directory, log and cluster config
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has been waited for
}

// started is every server started, for StopAll to stop, and which server
// software they run, for Main to tell.
var started struct {
	sync.Mutex
	list   []*Server
	server string // describeServer of the first one to answer
}

// Addr returns the server's host:port on loopback.
func (s *Server) Addr() string { return s.addr }

// Pid returns the server's process id, for tests that signal it.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop kills the server and removes its directory: nothing is persisted,
// so there is nothing to shut down gracefully. It returns once the process
// has exited, and is safe to call more than once.
func (s *Server) Stop() {
	_ = s.cmd.Process.Kill()
	<-s.exited
	_ = os.RemoveAll(s.dir)
}

// Log returns the last 4000 bytes of the server's log, for failure
// messages, or why there is none.
func (s *Server) Log() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Start starts a redis-server on a free loopback port, as a cluster node
// when cluster is true, with extraArgs appended to its command line, and
// returns once it answers PING. A port found free can be taken before the
// server binds it; that failure is retried on another port.
func Start(cluster bool, extraArgs ...string) (*Server, error) {
	return start(cluster, nil, extraArgs)
}

// startFirst is Start for a server whose command line starts with first,
// such as a configuration file.
func startFirst(first string, extraArgs ...string) (*Server, error) {
	return start(false, []string{first}, extraArgs)
}

func start(cluster bool, first, extraArgs []string) (*Server, error) {
	var lastErr error
	for range 3 {
		port, err := FreePort(cluster)
		if err != nil {
			return nil, err
		}
		s, portTaken, err := startOn(port, cluster, first, extraArgs)
		if err == nil || !portTaken {
			return s, err
		}
		lastErr = err
	}
	return nil, lastErr
}

// StartOn is Start on the given port, without retries: portTaken reports
// that the error is another process holding the port. Starting a server on
// the port of one a test stopped brings that server back.
func StartOn(port int, cluster bool, extraArgs ...string) (s *Server, portTaken bool, err error) {
	return startOn(port, cluster, nil, extraArgs)
}

func startOn(port int, cluster bool, first, extraArgs []string) (s *Server, portTaken bool, err error) {
	dir, err := os.MkdirTemp("", "ratelimit-redis-")
	if err != nil {
		return nil, false, fmt.Errorf("redis-server directory: %w", err)
	}
	logFile, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, false, fmt.Errorf("redis-server log: %w", err)
	}
	args := append(first,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
	)
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
	s = &Server{
		addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		dir:    dir,
		cmd:    cmd,
		exited: make(chan struct{}),
	}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	started.Lock()
	started.list = append(started.list, s)
	started.Unlock()

	if err := s.waitReady(); err != nil {
		log := s.Log()
		s.Stop()
		return nil, strings.Contains(log, "Address already in use"),
			fmt.Errorf("redis-server on %s did not come up: %w\nserver log:\n%s", s.addr, err, log)
	}
	return s, false, nil
}

// FreePort returns a loopback port that was free a moment ago. A cluster
// node also listens on port+10000 for its bus, so with cluster that one was
// free too.
func FreePort(cluster bool) (int, error) {
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

// ClosedAddr returns a loopback address that nothing listens on, for a
// client whose dials must be refused.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	port, err := listenAndClose(0)
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}

func listenAndClose(port int) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// killWithParent asks the kernel to kill the server when the test binary
// dies without reaching Main's cleanup (a panic, a -timeout). Pdeathsig
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
func (s *Server) waitReady() error {
	var info string
	err := Poll(startTimeout, func() error {
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
		started.Lock()
		if started.server == "" {
			started.server = describeServer(info)
		}
		started.Unlock()
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
	// INFO's executable is the server's argv[0] joined to its working
	// directory, wrong for a server found on PATH: say which one PATH has.
	if exe, err := exec.LookPath("redis-server"); err == nil {
		if abs, err := filepath.Abs(exe); err == nil {
			exe = abs
		}
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

// Poll calls check every 10 ms until it returns nil, and returns nil; or,
// once timeout has passed, returns check's last error, wrapped.
func Poll(timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		// Waiting on for a dead server only delays its log.
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
	srv  *Server
	err  error
}

func (l *lazyServer) get(t testing.TB) *Server {
	t.Helper()
	if !HaveServer() {
		SkipWithout(t, "redis-server is not on PATH: "+HowToRun)
	}
	l.once.Do(func() { l.srv, l.err = Start(false) })
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

// URL returns the URL of the single node the tests share: TEST_REDIS_URL
// if set, else that of a server this process starts on first use. It skips
// t under -short, and without a server as SkipWithout does.
func URL(t testing.TB) string {
	t.Helper()
	SkipIfShort(t)
	if u := os.Getenv("TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://" + singleServer.get(t).addr + "/0"
}

// Options returns fresh client options for URL(t), for tests that change
// them; it fails t when TEST_REDIS_URL does not parse.
func Options(t testing.TB) *redis.Options {
	t.Helper()
	opt, err := redis.ParseURL(URL(t))
	if err != nil {
		t.Fatalf("TEST_REDIS_URL: %v", err)
	}
	return opt
}

// Client returns a client of the shared single node (see URL) with a pool
// of its own, closed when t ends.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(Options(t))
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// Ring returns a ring of two shards (see RingOptions), closed when t ends.
func Ring(t testing.TB) *redis.Ring {
	t.Helper()
	ring := redis.NewRing(RingOptions(t))
	t.Cleanup(func() { ring.Close() })
	return ring
}

// RingOptions returns fresh options for a ring of two shards, "a" and "b":
// the shared single node and a second server this process starts. With
// TEST_REDIS_URL the second shard is a second name for the same server,
// which may want credentials that a server started here would not know;
// the ring's client code runs all the same.
func RingOptions(t testing.TB) *redis.RingOptions {
	t.Helper()
	opt := Options(t)
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
