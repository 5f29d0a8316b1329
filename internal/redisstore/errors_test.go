package redisstore

import (
	"errors"
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
