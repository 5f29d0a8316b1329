// Server: starting a redis-server process on a loopback port, and stopping it.

package redistest

import (
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
)

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
