package ratelimit

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/internal/testkit/httpresp"
	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// Helpers that the handler, fault and chaos tests share: one way to send a
// request, one store that never answers, one log that records, and the
// figures of a set of latencies.

// send hands GET path to h as fasthttp's server would, without a network,
// with tenant in X-Tenant unless it is empty, and returns the response as
// net/http has it. Every request the tests make goes through it.
func send(h fasthttp.RequestHandler, path, tenant string) *http.Response {
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI(path)
	ctx.Request.Header.SetMethod(fiber.MethodGet)
	if tenant != "" {
		ctx.Request.Header.Set("X-Tenant", tenant)
	}
	h(&ctx)
	return httpresp.FromFastHTTP(&ctx)
}

// get sends GET / to app for tenant ("" for none).
func get(t *testing.T, app *fiber.App, tenant string) *http.Response {
	t.Helper()
	return getPath(t, app, "/", tenant)
}

// getPath is get for another path.
func getPath(t *testing.T, app *fiber.App, path, tenant string) *http.Response {
	t.Helper()
	return send(app.Handler(), path, tenant)
}

// newApp returns an app that sets the tenant from the X-Tenant header (a
// test shortcut; real gateways resolve it), runs h and answers 200, counting
// the requests that reached it in reached when that is not nil.
func newApp(h fiber.Handler, reached *int) *fiber.App {
	app := fiber.New()
	app.Use(func(c *fiber.Ctx) error {
		if id := c.Get("X-Tenant"); id != "" {
			c.Locals("tenant", strings.Clone(id))
		}
		return c.Next()
	})
	app.Use(h)
	app.Get("/*", func(c *fiber.Ctx) error {
		if reached != nil {
			*reached++
		}
		return c.SendString("ok")
	})
	return app
}

// withDeadline runs h with a request context that ends after d, as a
// gateway's timeout middleware (Fiber's among them) hands the handlers
// after it.
func withDeadline(d time.Duration, h fiber.Handler) fiber.Handler {
	return withContext(func(ctx context.Context) (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, d)
	}, h)
}

// withCancelAfter runs h with a request context that is canceled after d,
// as when the client goes away.
func withCancelAfter(d time.Duration, h fiber.Handler) fiber.Handler {
	return withContext(func(ctx context.Context) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(ctx)
		stop := time.AfterFunc(d, cancel)
		return ctx, func() { stop.Stop(); cancel() }
	}, h)
}

func withContext(derive func(context.Context) (context.Context, context.CancelFunc), h fiber.Handler) fiber.Handler {
	return func(c *fiber.Ctx) error {
		ctx, cancel := derive(c.UserContext())
		defer cancel()
		c.SetUserContext(ctx)
		return h(c)
	}
}

// logRecorder is a slog.Handler that keeps every record, so that tests
// assert on a record's level, message and attributes, not on text that a
// handler formatted.
type logRecorder struct {
	store *logStore
	attrs []slog.Attr // from WithAttrs, before the record's own
	group string      // from WithGroup: the prefix of the record's keys
}

type logStore struct {
	mu    sync.Mutex
	lines []logLine
}

// logLine is one record: its level, its message and its attributes by key.
// A group's attributes are under "group.key".
type logLine struct {
	level slog.Level
	msg   string
	at    time.Time // when it was said, on the limiter's clock
	attrs map[string]slog.Value
}

func newLogRecorder() *logRecorder { return &logRecorder{store: &logStore{}} }

func (r *logRecorder) logger() *slog.Logger { return slog.New(r) }

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	line := logLine{level: rec.Level, msg: rec.Message, at: rec.Time, attrs: map[string]slog.Value{}}
	for _, a := range r.attrs {
		line.add("", a)
	}
	rec.Attrs(func(a slog.Attr) bool {
		line.add(r.group, a)
		return true
	})
	r.store.mu.Lock()
	defer r.store.mu.Unlock()
	r.store.lines = append(r.store.lines, line)
	return nil
}

func (l logLine) add(prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		for _, g := range v.Group() {
			l.add(prefix+a.Key+".", g)
		}
		return
	}
	l.attrs[prefix+a.Key] = v
}

func (r *logRecorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *r
	for _, a := range attrs {
		c.attrs = append(slices.Clip(c.attrs), slog.Attr{Key: r.group + a.Key, Value: a.Value})
	}
	return &c
}

func (r *logRecorder) WithGroup(name string) slog.Handler {
	c := *r
	c.group += name + "."
	return &c
}

// lines returns the records so far.
func (r *logRecorder) lines() []logLine {
	r.store.mu.Lock()
	defer r.store.mu.Unlock()
	return slices.Clone(r.store.lines)
}

// withMsg returns the records whose message starts with prefix.
func (r *logRecorder) withMsg(prefix string) []logLine {
	var out []logLine
	for _, l := range r.lines() {
		if strings.HasPrefix(l.msg, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// str is the attribute key as text; "" when there is none.
func (l logLine) str(key string) string {
	v, ok := l.attrs[key]
	if !ok {
		return ""
	}
	return v.String()
}

// int is the integer attribute key, and whether there is one.
func (l logLine) int(key string) (int64, bool) {
	v, ok := l.attrs[key]
	if !ok || v.Kind() != slog.KindInt64 {
		return 0, false
	}
	return v.Int64(), true
}

// err is the error the record carries under "err", or nil.
func (l logLine) err() error {
	err, _ := l.attrs["err"].Any().(error)
	return err
}

func (l logLine) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v %q", l.level, l.msg)
	for _, k := range slices.Sorted(maps.Keys(l.attrs)) {
		fmt.Fprintf(&b, " %s=%q", k, l.attrs[k].String())
	}
	return b.String()
}

// blackHole accepts connections and reads whatever they send, answering
// nothing: a store behind a network that drops every reply, or a server
// that hangs.
type blackHole struct {
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

// startBlackHole starts a black hole on a loopback port, closed when the
// test ends.
func startBlackHole(t testing.TB) *blackHole {
	t.Helper()
	return startBlackHoleOn(t, "127.0.0.1:0")
}

// startBlackHoleOn starts a black hole on addr: on the port of a server a
// test killed, it is another process that took the port over and never
// answers. The port of a process just killed may take a moment to be
// free.
func startBlackHoleOn(t testing.TB, addr string) *blackHole {
	t.Helper()
	var ln net.Listener
	err := redistest.Poll(2*time.Second, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	b := &blackHole{ln: ln}
	b.wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			if b.closed {
				b.mu.Unlock()
				conn.Close()
				return
			}
			b.conns = append(b.conns, conn)
			b.mu.Unlock()
			b.wg.Go(func() { _, _ = io.Copy(io.Discard, conn) })
		}
	})
	t.Cleanup(b.close)
	return b
}

func (b *blackHole) addr() string { return b.ln.Addr().String() }

func (b *blackHole) close() {
	b.mu.Lock()
	b.closed = true
	b.ln.Close()
	for _, c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// newFiberLimiter builds what RateLimitShared builds, on the clock now.
func newFiberLimiter(cfg Config, now func() time.Time) (*Limiter, fiber.Handler) {
	l := newLimiter(cfg.options(), now)
	return l, newFiberDoor(l, cfg).handle
}

// fiberHandler is RateLimitShared on the clock now.
func fiberHandler(cfg Config, now func() time.Time) fiber.Handler {
	_, h := newFiberLimiter(cfg, now)
	return h
}

// burstAtOnce sends requests for tenant at once, spread in turn over limiters,
// and returns how many the store decided (the counter, or the over-limit
// cache refusing from its answers) and how many were allowed by anyone.
func burstAtOnce(limiters []*Limiter, tenant string, requests int) (decided, allowed int64) {
	var nd, na atomic.Int64
	var wg sync.WaitGroup
	release := make(chan struct{})
	for i := range requests {
		lim := limiters[i%len(limiters)]
		wg.Go(func() {
			<-release
			d := lim.Take(context.Background(), tenant)
			if d.By == ByCounter || d.By == ByCache && !d.Allowed {
				nd.Add(1)
			}
			if d.Allowed {
				na.Add(1)
			}
		})
	}
	close(release)
	wg.Wait()
	return nd.Load(), na.Load()
}

// newMemoryCounter is NewMemoryCounter whose Incr reads the clock now. A
// Limiter's requests carry the Limiter's own clock, which the counter
// counts on: give the Limiter the same clock (newLimiter).
func newMemoryCounter(now func() time.Time, opts ...MemoryOption) *MemoryCounter {
	m := NewMemoryCounter(opts...)
	m.now = now
	return m
}

// storeClock returns the clock lim's store decides on: the fake clock of
// a memory store on one, or the Redis server's own (TIME). A test reads
// it around a burst to learn how long the store saw the burst take, and
// so what refilled or rolled over meanwhile.
func storeClock(t *testing.T, lim *Limiter) func() time.Time {
	rc, ok := lim.opts.Counter.(*RedisCounter)
	if !ok {
		return lim.clock.Now
	}
	return func() time.Time {
		t.Helper()
		now, err := rc.rdb.Time(context.Background()).Result()
		if err != nil {
			t.Fatalf("TIME: %v", err)
		}
		return now
	}
}

// eachReplicaSubject runs f on every store with a limiter of opts on each
// of three replicas, each with Metrics of its own: on memory they share
// one MemoryCounter and one fake clock, and on Redis each has a client of
// its own on the same servers. advance moves the memory replicas' clock,
// or sleeps (Redis's clock is the server's).
func eachReplicaSubject(t *testing.T, opts Options, f func(t *testing.T, lims []*Limiter, tenant string, advance func(time.Duration))) {
	for _, s := range takeSubjects {
		t.Run(s.name, func(t *testing.T) {
			o := opts
			if o.Logger == nil {
				o.Logger = newLogRecorder().logger()
			}
			o.StoreTimeout = cmp.Or(o.StoreTimeout, countingTimeout)
			var lims []*Limiter
			c, clock := s.counter(t)
			advance := time.Sleep
			for range 3 {
				o.Counter, o.Metrics = c, &Metrics{}
				if clock != nil {
					lims = append(lims, newLimiter(o, clock.Now))
					advance = clock.Advance
					continue
				}
				lims = append(lims, NewLimiter(o))
				c, _ = s.counter(t) // the next replica's own client
			}
			if clock == nil {
				clearOfTheHour(t)
			}
			for _, l := range lims {
				// As a gateway does at start-up; with Leases, the store's
				// first answer says it decides, and blocks may be claimed.
				if err := l.Ping(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			f(t, lims, uniqueTenant(t), advance)
		})
	}
}

// panicOf is what f panics with, or "no panic".
func panicOf(f func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	f()
	return "no panic"
}
