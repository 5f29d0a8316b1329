// Loopback ports: free ones for servers to take, closed ones for clients to
// be refused.

package redistest

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
)

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
