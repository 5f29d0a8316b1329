// Waiting until a started server answers, and telling which server software
// it is.

package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

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
