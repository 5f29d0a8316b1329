package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// The errors of a round trip, as the limiter reads them: through methods
// (Fix, KeyOnly, RoundTrip) that the ratelimit package asks for by
// interfaces of its own, so that it names no type of this package.

// errTimedOut: the caller's wait ended before the answer came. It wraps
// context.DeadlineExceeded, which is what it is.
var errTimedOut = fmt.Errorf("no answer in time: %w", context.DeadlineExceeded)

// errNeedsScripts: a sliding window, quotas, slots in flight or a give
// back on a server that refuses scripts.
var errNeedsScripts = errors.New("a sliding window, a token bucket, quotas, InFlight and giving back need the server to run scripts")

// errNotCounter: a key holds something other than what the limiter keeps
// there.
var errNotCounter = errors.New("the key holds something other than a count")

// misconfigured is an answer that says the store is set up wrong rather
// than down (a wrong password, a missing permission, an unknown database,
// a key that holds something else), with what to fix.
type misconfigured struct {
	err  error
	hint string
}

func (e *misconfigured) Error() string { return e.err.Error() }
func (e *misconfigured) Unwrap() error { return e.err }

// Fix says what to fix.
func (e *misconfigured) Fix() string { return e.hint }

// keyMisconfigured is a misconfigured that the server answered for one key
// (a key of another type, a key of another node's slot): the server is
// up, and serves other keys.
type keyMisconfigured struct{ misconfigured }

// KeyOnly says that the answer is about one key, not the server.
func (*keyMisconfigured) KeyOnly() {}

// The permissions an ACL user needs, by what it runs: docs/redis.md lists
// them, and a test runs each algorithm through a user that has exactly
// these. On a cluster, the client also needs +cluster|slots for its slot
// map; on Redis 6, Ping's check that a plain client is not talking to a
// cluster node needs +info (Redis 7 lets every user run HELLO).
const (
	ACLFixed     = "~rl:* +evalsha +eval +get +incrby +decrby +del +pexpire +pttl +ping"
	ACLSliding   = "~{rl:* +evalsha +eval +time +get +incrby +decrby +del +pexpire +ping"
	ACLNoScripts = "~rl:* +set +incrby +pttl +multi +exec +ping"
	ACLQuotas    = "~rl:* ~{rl:* +evalsha +eval +time +hmget +hset +pexpire +del +ping"
	ACLInFlight  = "~rl:* +evalsha +eval +time +zremrangebyscore +zcard +zadd +zrem +zcount +pexpire +del +ping"
	ACLBucket    = "~rl:* +evalsha +eval +time +get +set +del +ping"

	// ACLFunctions is what Redis 7 and later, and Valkey, need beside any
	// of the above for the counter to call its FUNCTION library (see
	// library.go); with them, +evalsha +eval may go. Redis 6.0's ACL knows
	// neither command. A user without them runs the same Lua as an EVAL
	// script, which costs the server more per call.
	ACLFunctions = "+fcall +function|load"
)

// fixes are the answers that mean misconfiguration, by words they hold
// (Redis 6 and 7 word a script's failures differently from Redis 8 and
// Valkey), with what to fix.
var fixes = []struct {
	words []string
	fix   string
}{
	// An unauthenticated client gets NOAUTH, or, for a call of more than 10
	// arguments or an argument of more than 16 KiB (a batch of keys, a
	// tenant's quotas), a protocol error, after which the server closes
	// the connection.
	{[]string{"NOAUTH", "Protocol error: unauthenticated"}, fixPassword},
	{[]string{"WRONGPASS"}, "the username or password is wrong: check the client's Username and Password"},
	{[]string{"NOPERM", "can't run this command", "no permissions to run"},
		"the ACL user lacks a permission: grant it, for a fixed window, " + ACLFixed + "; for a sliding window, " + ACLSliding +
			"; with quotas, " + ACLQuotas + "; for InFlight, " + ACLInFlight + "; for a token bucket, " + ACLBucket +
			"; on Redis 7 and later, and Valkey, " + ACLFunctions + " as well, or instead of +evalsha +eval" +
			" (docs/redis.md lists them, and the cluster's)"},
	{[]string{"OOM command not allowed"}, "the server is at its maxmemory and evicts nothing (maxmemory-policy noeviction): " +
		"raise maxmemory, or use a policy that evicts, such as volatile-ttl: every key the limiter writes has an expiry"},
	{[]string{"READONLY"}, "the server is a read-only replica: point the client at the primary, " +
		"or let it find the primary (redis.NewFailoverClient with Sentinel, redis.NewClusterClient)"},
	{[]string{"DB index is out of range"}, "the database does not exist: the client's DB (the number at the end of the URL) must be below the server's databases setting, 16 by default"},
	{[]string{"SELECT is not allowed in cluster mode"}, "a cluster has only database 0: drop the client's DB"},
}

const fixPassword = "the server wants a password: set the client's Password (and Username, for an ACL user)"

const fixNotCounter = "a key under rl: holds something other than a count, which another program wrote: give the limiter a Name of its own, or delete the key"

// clusterAnswers start the answers of a cluster node to a client that
// does not follow a cluster: a key of another node's slot, a key being
// moved, keys of several slots in one call.
var clusterAnswers = []string{"MOVED", "ASK", "CROSSSLOT"}

// fixClusterNode is what to fix when a plain client talks to a cluster
// node.
const fixClusterNode = "this server is a cluster node: use redis.NewClusterClient (or redis.NewUniversalClient with the cluster's addresses), which sends each key to its node"

// classify returns err as a misconfigured when it is an answer that means
// misconfiguration, and err as it is otherwise. cluster says that the
// client follows a cluster, which handles the redirections of
// clusterAnswers itself: from such a client they are a cluster changing
// under it, not a mistake.
func classify(err error, cluster bool) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*misconfigured](err); ok {
		return err
	}
	if _, ok := errors.AsType[*keyMisconfigured](err); ok {
		return err
	}
	switch {
	case errors.Is(err, errNotCounter) || redis.HasErrorPrefix(err, "WRONGTYPE"):
		return &keyMisconfigured{misconfigured{err, fixNotCounter}}
	case errors.Is(err, errNeedsScripts):
		return &misconfigured{err, "the server refuses scripts, which the sliding window, the token bucket, quotas, InFlight and Release need: grant the user " +
			ACLSliding + " (with quotas, " + ACLQuotas + "; for InFlight, " + ACLInFlight + "; for a token bucket, " + ACLBucket + "), or use FixedWindow without Quotas"}
	}
	msg := err.Error()
	if !cluster {
		for _, a := range clusterAnswers {
			if redis.HasErrorPrefix(err, a) {
				return &keyMisconfigured{misconfigured{err, fixClusterNode}}
			}
		}
	}
	for _, f := range fixes {
		for _, w := range f.words {
			if strings.Contains(msg, w) {
				return &misconfigured{err, f.fix}
			}
		}
	}
	return err
}

// unauthenticated remembers that a server refused a client as
// unauthenticated. After the protocol error the server closes the
// connection, which go-redis keeps in its pool, having read an answer on
// it: the next call on it fails with EOF, or a reset, rather than with an
// answer. On such a server that failure is the same misconfiguration.
type unauthenticated struct{ refused atomic.Bool }

// name returns err, a round trip's classified failure, as a
// misconfiguration when it is a closed connection of a server that
// refused the client as unauthenticated; and remembers whether err is
// such a refusal. nil, an answer, forgets it.
func (u *unauthenticated) name(err error) error {
	if err == nil {
		if u.refused.Load() { // a load, not a store, on the hot path
			u.refused.Store(false)
		}
		return nil
	}
	if m, ok := errors.AsType[*misconfigured](err); ok && m.hint == fixPassword {
		u.refused.Store(true)
		return err
	}
	if u.refused.Load() && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		return &misconfigured{fmt.Errorf("%w (the server closed the connection, having refused the client as unauthenticated)", err), fixPassword}
	}
	return err
}

// tripError is the failure of one round trip, which all its callers get:
// the breaker counts it once.
type tripError struct {
	trip uint64 // from tripIDs
	err  error
}

// tripIDs numbers the round trips that failed, in every batcher.
var tripIDs atomic.Uint64

func (e *tripError) Error() string { return e.err.Error() }
func (e *tripError) Unwrap() error { return e.err }

// RoundTrip names the round trip that failed.
func (e *tripError) RoundTrip() uint64 { return e.trip }
