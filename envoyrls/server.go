package envoyrls

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Options configures a Server. Its fields are those of ratelimit.Options
// that every rule's Limiter shares; the rules themselves come from the
// configuration (Server.Load).
type Options struct {
	// Store counts every rule's requests. Give every replica a
	// RedisCounter over the same Redis to share one budget between them.
	//
	// Optional. Default: a new MemoryCounter, for this process alone
	Store store.Store

	// StoreTimeout is the most a call waits for the store (see
	// ratelimit.Options.StoreTimeout). Envoy's rate limit filter waits 20
	// ms for the service by default, then lets the request through: the
	// default answers a call within that even when the store does not.
	//
	// Optional. Default: 15ms
	StoreTimeout time.Duration

	// FailClosed answers OVER_LIMIT for a descriptor that the store could
	// not decide, instead of OK (see ratelimit.Options.FailClosed). The
	// rate limit service guards the gateway's own upstreams, and Envoy
	// lets a request through when the service fails: failing open is the
	// default, as it is Envoy's.
	//
	// Optional. Default: false
	FailClosed bool

	// Fallback decides while the store fails, for each replica alone (see
	// ratelimit.Options.Fallback), typically a MemoryCounter, at each
	// rule's own limits.
	//
	// Optional. Default: nil
	Fallback store.Store

	// BreakerFailures and BreakerCooldown are each Limiter's circuit
	// breaker's (see ratelimit.Options).
	//
	// Optional. Defaults: 5 and 1s
	BreakerFailures int
	BreakerCooldown time.Duration

	// Headers adds the IETF RateLimit-Policy and RateLimit fields
	// (draft-ietf-httpapi-ratelimit-headers-11) to every answer, in
	// response_headers_to_add, for Envoy to write into the response: an
	// item for each descriptor that a limit decided.
	//
	// Optional. Default: false
	Headers bool

	// Logger receives the lines of the Limiters (a store that fails, one
	// line a second at most) and of reloads.
	//
	// Optional. Default: slog.Default()
	Logger *slog.Logger

	// Metrics, when set, is given each rule's ratelimit.Metrics as its
	// Limiter is made, under the rule's path ("domain.key_value.key"): a
	// Collector of github.com/gatewaykit/ratelimit/prometheus or the
	// Instruments of github.com/gatewaykit/ratelimit/ratelimitotel.
	//
	// Optional. Default: nil
	Metrics interface {
		Add(limiter string, m *ratelimit.Metrics)
	}
}

// Server answers Envoy's ShouldRateLimit calls by the rules of its
// configuration, each decided by a ratelimit.Limiter. It is safe for
// concurrent use, and Load replaces its configuration while it serves.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer

	opts   Options
	rules  atomic.Pointer[rules]
	lims   limiters
	loadMu sync.Mutex
	own    *ratelimit.MemoryCounter // the default store, which Close closes

	logged   atomic.Int64 // when logLimited last logged, in Unix nanoseconds
	unlogged atomic.Int64 // the lines since, unlogged
}

// NewServer returns a Server without a configuration: until Load, every
// call is answered OK, as for a domain that no file names.
func NewServer(opts Options) *Server {
	var own *ratelimit.MemoryCounter
	if opts.Store == nil {
		own = ratelimit.NewMemoryCounter()
		opts.Store = own
	}
	if opts.StoreTimeout == 0 {
		opts.StoreTimeout = 15 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{opts: opts, own: own}
	s.lims.opts = &s.opts
	empty, err := compile(nil)
	if err != nil {
		panic(err) // no configuration is a good one
	}
	s.rules.Store(empty)
	return s
}

// Register registers s on g as Envoy's RateLimitService.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(g, s)
}

// Load checks cfgs and, when every rule is good, makes them the
// configuration that decides the next calls. A configuration that does
// not load changes nothing and says why. The counts carry on across
// loads: a rule keeps its keys in the store whatever its limits (a rule
// whose algorithm changes starts afresh), and takes its new limits from
// its tenants' next requests.
func (s *Server) Load(cfgs []Config) error {
	rs, err := compile(cfgs)
	if err != nil {
		return err
	}
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	if err := s.lims.prepare(rs); err != nil {
		return err
	}
	s.rules.Store(rs)
	return nil
}

// ShouldRateLimit decides a request's descriptors all or nothing: it is
// OVER_LIMIT when any descriptor is, and then what the others took is
// given back, so that a refused request spends nothing. Each status, in
// the request's order, reports the limit that decided its descriptor.
// An empty domain or a request without descriptors is an error
// (InvalidArgument), as it is the reference's.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	switch {
	case req.GetDomain() == "":
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	case len(req.GetDescriptors()) == 0:
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	c := newCall(s, req)
	c.decide(ctx)
	return c.response(), nil
}

// Close releases the default store, when NewServer made it; a store of
// Options is the caller's to close.
func (s *Server) Close() error {
	if s.own != nil {
		return s.own.Close()
	}
	return nil
}

// failure logs a store failure of d that no Limiter logs: a read's.
func (s *Server) failure(msg string, d *descriptor, err error) {
	s.logLimited(slog.LevelError, msg, slog.String("rule", d.r.path), slog.String("tenant", d.tenant), slog.Any("err", err))
}

// logLimited logs one line a second at most, with the lines left unsaid
// since.
func (s *Server) logLimited(level slog.Level, msg string, attrs ...slog.Attr) {
	now := time.Now().UnixNano()
	last := s.logged.Load()
	if now-last < int64(time.Second) || !s.logged.CompareAndSwap(last, now) {
		s.unlogged.Add(1)
		return
	}
	attrs = append(attrs, slog.Int64("unlogged", s.unlogged.Swap(0)))
	s.opts.Logger.LogAttrs(context.Background(), level, msg, attrs...)
}
