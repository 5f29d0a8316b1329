package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The nodes of a RedisCounter. Each server that its keys live on (a
// cluster's primaries, a ring's shards; the one server of a single-node
// client) has a node of the counter's: a batcher of its own, so that round
// trips in flight to a stuck node hold up only that node's calls, and a dial
// watch of its own, so that a dial it fails ends only that node's round
// trips. The limiter keeps a breaker per node (see nodeCounter), so one
// node's failures open only its own.
//
// A key's node is the one its client would send it to: the cluster's
// primary for its hash slot, as the client's slot map has it, or the ring's
// shard for it. The round trips still go through the cluster or ring
// client, which follows redirects (MOVED, ASK) itself. Nodes are made as
// keys meet them, whether the client made its connection to the server
// before NewRedisCounter or after, and each hooks the dial watch into the
// client of its server.
//
// When a round trip to a cluster node fails for want of an answer (a
// refused or reset connection, a failed dial, a timeout), the node may be
// gone: its replica may be taking over. The counter then asks the cluster
// client to reload its slot map at once, which it does at most every 200 ms
// however often asked, rather than waiting for its periodic reload (60 s
// by default) or a redirect that a dead node never sends.

// The client the round trips go through is the user's, always: its
// hooks (tracing, metrics) see every command the counter sends, whether
// they were added before the counter was made or after. A call that finds
// no round trip in flight makes its round trip on its own goroutine only
// when the client puts the deadline of each round trip's context on the
// socket (ContextTimeoutEnabled; see batcher). Otherwise go-redis bounds a
// read by ReadTimeout (3 s by default), not by the call's deadline, so the
// round trip runs on a goroutine of the batcher's and the call waits for
// it no longer than its deadline. That costs a lone call some latency (a
// goroutine hand-off each way; docs/redis.md says how much), which a
// client with ContextTimeoutEnabled does not pay. The counter never clones
// the client to save it: go-redis gives a clone none of the hooks.

// socketDeadlines reports whether a client's options put a context's
// deadline on the socket: ContextTimeoutEnabled, and both timeouts above
// none, below which go-redis makes no deadline calls at all. none is -1 in
// a *redis.Client's options as go-redis set them, and -2 in a cluster's or
// a ring's, which they map to -1 for their nodes' clients.
func socketDeadlines(contextTimeout bool, read, write, none time.Duration) bool {
	return contextTimeout && read > none && write > none
}

// node is one server of a RedisCounter.
type node struct {
	id    int    // the node's number in its counter: 0, 1, ...
	addr  string // the server's address, for the log
	batch *batcher
	dials *dialWatch
	auth  unauthenticated // the server refused the client as unauthenticated

	hooked *redis.Client // the client the dial watch is hooked into
}

// nodes routes a RedisCounter's keys to its nodes.
type nodes struct {
	rdb       redis.UniversalClient
	cluster   *redis.ClusterClient // when rdb is one
	ring      *redis.Ring          // when rdb is one
	route     route                // how a node's round trip maps onto script calls
	deadlines bool                 // rdb puts contexts' deadlines on its sockets

	// first is the node of a single server, and the one that carries the
	// calls of a cluster or ring whose node its client cannot name yet: a
	// cluster client before it has loaded its slot map, a ring with no
	// shard up. Its round trips go through the client's own routing.
	first *node

	// ready: a cluster client has loaded its slot map, so that asking it
	// for a key's primary no longer makes a round trip.
	ready atomic.Bool

	// refused is the servers' refusal to run scripts, once one has said so
	// (see noscript.go).
	refused atomic.Pointer[error]

	// eval: a server could not run the Lua as a library; every call is an
	// EVAL from then on (library.go).
	eval atomic.Bool

	byClient atomic.Pointer[map[*redis.Client]*node] // replaced, never changed
	mu       sync.Mutex                              // held to replace byClient
	byAddr   map[string]*node                        // every node but first, under mu
}

func newNodes(rdb redis.UniversalClient) *nodes {
	ns := &nodes{rdb: rdb, route: byKey, byAddr: map[string]*node{}}
	switch c := rdb.(type) {
	case *redis.Client:
		o := c.Options() // as go-redis set them: a timeout of -1 makes no deadline calls
		ns.route = allKeys
		ns.deadlines = socketDeadlines(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout, -1)
	case *redis.Ring:
		o := c.Options()
		ns.ring, ns.route = c, byShard
		ns.deadlines = socketDeadlines(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout, -2)
	case *redis.ClusterClient:
		o := c.Options()
		ns.cluster = c
		ns.deadlines = socketDeadlines(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout, -2)
	}
	ns.byClient.Store(&map[*redis.Client]*node{})
	switch c := rdb.(type) {
	case *redis.Client:
		ns.first = ns.newNode(c.Options().Addr)
		ns.hook(ns.first, c)
	case *redis.ClusterClient:
		// Until the slot map is known, any node the client makes may
		// carry the first node's round trips.
		ns.first = ns.newNode("")
		c.OnNewNode(func(node *redis.Client) { node.AddHook(ns.first.dials) })
	default:
		ns.first = ns.newNode("")
	}
	return ns
}

// manyNodes reports whether the keys may live on several nodes.
func (ns *nodes) manyNodes() bool { return ns.cluster != nil || ns.ring != nil }

// of returns key's node.
func (ns *nodes) of(key string) *node {
	var (
		c   *redis.Client
		err error
	)
	switch {
	case ns.ring != nil:
		c, err = ns.ring.GetShardClientForKey(key)
	case ns.cluster != nil && ns.ready.Load():
		// The slot map is loaded: no round trip.
		c, err = ns.cluster.MasterForKey(context.Background(), key)
	default:
		return ns.first
	}
	if err != nil {
		return ns.first // the client's own routing fails the call
	}
	if n, ok := (*ns.byClient.Load())[c]; ok {
		return n
	}
	return ns.add(c)
}

// add returns the node of the server of client c, made if it is new. A
// client the cluster client made anew for a server it had dropped gets
// that server's node, hooked into the new client.
func (ns *nodes) add(c *redis.Client) *node {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	old := *ns.byClient.Load()
	if n, ok := old[c]; ok {
		return n
	}
	addr := c.Options().Addr
	n, ok := ns.byAddr[addr]
	if !ok {
		n = ns.newNode(addr)
		ns.byAddr[addr] = n
	}
	ns.hook(n, c)
	m := make(map[*redis.Client]*node, len(ns.byAddr))
	for client, other := range old {
		if other != n { // n's earlier client is gone
			m[client] = other
		}
	}
	m[c] = n
	ns.byClient.Store(&m)
	return n
}

// newNode makes the next node, first's being 0.
func (ns *nodes) newNode(addr string) *node {
	n := &node{addr: addr, dials: &dialWatch{}}
	if ns.first != nil {
		n.id = len(ns.byAddr) + 1
	}
	s := &scripter{ns: ns, dials: n.dials}
	n.batch = newBatcher(func(ctx context.Context, cancel context.CancelFunc, ops []*takeOp) {
		s.send(ctx, cancel, ops)
		ns.learn(ops)
	}, ns.deadlines)
	return n
}

// hook hooks n's dial watch into c, the client of n's server.
func (ns *nodes) hook(n *node, c *redis.Client) {
	if n.hooked != c {
		c.AddHook(n.dials)
		n.hooked = c
	}
}

// learn follows a cluster from the answers of a round trip. One answer
// says the client has loaded its slot map. A failure that says a node may
// be gone has the client reload it.
func (ns *nodes) learn(ops []*takeOp) {
	if ns.cluster == nil {
		return
	}
	for _, op := range ops {
		switch {
		case op.err == nil:
			if !ns.ready.Load() {
				ns.ready.Store(true)
			}
		case nodeMayBeGone(op.err):
			ns.cluster.ReloadState(context.Background())
			return
		}
	}
}

// nodeMayBeGone reports whether err says that a server did not answer: a
// network error (a refused or reset connection, a failed dial, a timeout)
// or a connection closed under the call. An error the server sent says it
// is there.
func nodeMayBeGone(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	_, ok := errors.AsType[net.Error](err)
	return ok
}

// EachServer calls fn for every server that rdb knows: itself, a cluster's
// primaries, a ring's shards. It reports false, calling nothing, for a
// client of another kind.
func EachServer(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, *redis.Client) error) (bool, error) {
	switch c := rdb.(type) {
	case *redis.Client:
		return true, fn(ctx, c)
	case *redis.ClusterClient:
		return true, c.ForEachMaster(ctx, fn)
	case *redis.Ring:
		return true, c.ForEachShard(ctx, fn)
	}
	return false, nil
}
