package redisstore

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// The answers that mean misconfiguration, as each server words them, and
// those that do not.
func TestMisconfiguredAnswersAreRecognised(t *testing.T) {
	for _, tt := range []struct {
		err     string
		cluster bool
		fix     string // a word of it; "" for not a misconfiguration
	}{
		{"NOAUTH Authentication required.", false, "Password"},
		{"ERR Protocol error: unauthenticated multibulk length", false, "Password"}, // a call of more than 10 arguments, unauthenticated
		{"ERR Protocol error: unauthenticated bulk length", false, "Password"},      // an argument of more than 16 KiB, unauthenticated
		{"NOPERM this user has no permissions to run the 'evalsha' command", false, ACLFixed},
		{"The user executing the script can't run this command or subcommand", false, ACLFixed},                                         // Redis 6, in a script
		{"ERR The user executing the script can't run this command or subcommand script: 105e, on @user_script:53.", false, ACLSliding}, // Redis 7
		{"ERR ACL failure in script: User lim has no permissions to run the 'time' command script: 105e", false, ACLSliding},            // Redis 8, Valkey
		{"OOM command not allowed when used memory > 'maxmemory'.", false, "maxmemory"},
		{"READONLY You can't write against a read only replica.", false, "primary"},
		{"MOVED 12006 127.0.0.1:7001", false, "redis.NewClusterClient"},
		{"ASK 12006 127.0.0.1:7001", false, "redis.NewClusterClient"},
		{"CROSSSLOT Keys in request don't hash to the same slot", false, "redis.NewClusterClient"},
		{"MOVED 12006 127.0.0.1:7001", true, ""}, // a cluster client follows it; one that could not is a cluster changing
		{"CLUSTERDOWN The cluster is down", true, ""},
		{"LOADING Redis is loading the dataset in memory", false, ""},
	} {
		err := classify(serverAnswer(tt.err), tt.cluster)
		m, ok := errors.AsType[interface {
			error
			Fix() string
		}](err)
		switch {
		case tt.fix == "" && ok:
			t.Errorf("%q (cluster client %v) taken for a misconfiguration: %s", tt.err, tt.cluster, m.Fix())
		case tt.fix != "" && !ok:
			t.Errorf("%q (cluster client %v) not taken for a misconfiguration", tt.err, tt.cluster)
		case ok && !strings.Contains(m.Fix(), tt.fix):
			t.Errorf("%q: fix %q, want one saying %q", tt.err, m.Fix(), tt.fix)
		}
	}
}

// serverAnswer is an error reply of a server, as go-redis gives one.
type serverAnswer string

func (e serverAnswer) Error() string { return string(e) }
func (serverAnswer) RedisError()     {}

// After refusing a client as unauthenticated, the server closes the
// connection, and the next call on it fails with EOF: on that server, the
// same misconfiguration, until an answer comes.
func TestClosedConnectionAfterUnauthenticated(t *testing.T) {
	var u unauthenticated
	closed := fmt.Errorf("round trip: %w", io.EOF)
	if _, ok := errors.AsType[*misconfigured](u.name(closed)); ok {
		t.Fatal("EOF from a server that refused nothing taken for a misconfiguration")
	}
	u.name(classify(serverAnswer("ERR Protocol error: unauthenticated multibulk length"), false))
	err := u.name(closed)
	if m, ok := errors.AsType[*misconfigured](err); !ok || m.Fix() != fixPassword || !errors.Is(err, io.EOF) {
		t.Fatalf("EOF after the protocol error: %v; want a misconfiguration with the password's fix, wrapping the EOF", err)
	}
	u.name(nil) // an answer
	if _, ok := errors.AsType[*misconfigured](u.name(closed)); ok {
		t.Fatal("EOF after an answer taken for a misconfiguration")
	}
}
