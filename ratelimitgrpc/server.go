package ratelimitgrpc

import (
	"context"
	"errors"
	"net/netip"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gatewaykit/ratelimit"
)

// UnaryServerInterceptor returns a unary server interceptor that decides
// each call with lim before its handler runs, as the package doc
// describes. It panics when lim is nil, or, naming the field, when cfg
// asks for what lim cannot do.
func UnaryServerInterceptor(lim *ratelimit.Limiter, cfg Config) grpc.UnaryServerInterceptor {
	return newServer(lim, cfg, "UnaryServerInterceptor").unary
}

// StreamServerInterceptor returns a stream server interceptor that
// decides each stream with lim when it opens, or each message it
// receives when cfg.PerMessage is set, as the package doc describes. It
// panics when lim is nil, or, naming the field, when cfg asks for what
// lim cannot do.
func StreamServerInterceptor(lim *ratelimit.Limiter, cfg Config) grpc.StreamServerInterceptor {
	s := newServer(lim, cfg, "StreamServerInterceptor")
	if s.perMessage {
		switch {
		case s.m.Holds():
			panic("ratelimitgrpc: PerMessage: an InFlight limiter holds a call's slots until the call ends, " +
				"and a message has no end to give them back at")
		case cfg.CostAfter != nil:
			panic("ratelimitgrpc: PerMessage: CostAfter settles a call by its response, and a message has none of its own")
		case cfg.SkipFailedRequests || cfg.SkipSuccessfulRequests:
			panic("ratelimitgrpc: PerMessage: SkipFailedRequests and SkipSuccessfulRequests give a call back by its outcome, " +
				"and a message has none of its own")
		}
	}
	return s.stream
}

// server is what the server interceptors of one Config run.
type server struct {
	m            *ratelimit.Middleware[call]
	next         func(context.Context, string) bool
	limitReached func(context.Context, string, ratelimit.Decision) error
	perMessage   bool
}

// call is a call as the Middleware reads it.
type call struct {
	ctx    context.Context
	method string
	// req is the unary request, or a stream's message counted on its
	// own; nil for a stream counted when it opens.
	req any
	// resp and err are what the handler returned, for CostAfter.
	resp  any
	err   error
	state *callState
	// stream is the call's stream; nil for a unary call, whose trailer
	// is set through its context.
	stream grpc.ServerStream
}

// setTrailer sets md as c's trailer metadata.
func (c *call) setTrailer(md metadata.MD) {
	if c.stream != nil {
		c.stream.SetTrailer(md)
		return
	}
	_ = grpc.SetTrailer(c.ctx, md) // fails only without a stream (an interceptor called directly)
}

func newServer(lim *ratelimit.Limiter, cfg Config, who string) *server {
	if lim == nil {
		panic("ratelimitgrpc: " + who + " needs a *ratelimit.Limiter, got nil")
	}
	cfg = configDefault(cfg)
	tenant, clientIP := cfg.Tenant, cfg.ClientIP
	mc := ratelimit.MiddlewareConfig[call]{
		Tenant:                 func(c call) (string, bool) { return tenant(c.ctx, c.method) },
		AnonymousByIP:          cfg.AnonymousByIP,
		ClientIP:               func(c call) netip.Addr { return clientIP(c.ctx) },
		MaxDelay:               cfg.MaxDelay,
		SkipFailedRequests:     cfg.SkipFailedRequests,
		SkipSuccessfulRequests: cfg.SkipSuccessfulRequests,
		Status:                 outcome,
	}
	if cost := cfg.Cost; cost != nil {
		mc.Cost = func(c call) int { return cost(c.ctx, c.method, c.req) }
	}
	if costAfter := cfg.CostAfter; costAfter != nil {
		mc.CostAfter = func(c call) int { return costAfter(c.ctx, c.method, c.resp, c.state.handlerMetadata(), c.err) }
	}
	m, err := ratelimit.NewMiddleware(lim, mc)
	if err != nil {
		panic("ratelimitgrpc: " + err.Error())
	}
	return &server{m: m, next: cfg.Next, limitReached: cfg.LimitReached, perMessage: cfg.PerMessage}
}

// outcome is the status that the skip rules read of a call whose handler
// returned err: a failure (500) for any code but OK.
func outcome(_ call, err error) int {
	if status.Code(err) != codes.OK {
		return 500
	}
	return 200
}

func (s *server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.next != nil && s.next(ctx, info.FullMethod) {
		return handler(ctx, req)
	}
	ctx, l := join(ctx)
	if l.owner() {
		ctx = l.unaryOwner(ctx)
		defer l.call.flush()
	}
	c := call{ctx: ctx, method: info.FullMethod, req: req, state: l.call}
	d, refused := s.decide(&c, l)
	if refused != nil {
		return nil, refused
	}
	if s.m.Holds() {
		defer s.m.Done(ctx, c, &d, nil, false) // the slots come back whatever the handler does
		return handler(ctx, req)
	}
	resp, err := handler(ctx, req)
	if s.m.GivesBack() {
		c.resp, c.err = resp, err
		s.m.Done(ctx, c, &d, err, l.refused.Load())
	}
	return resp, err
}

func (s *server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if s.next != nil && s.next(ss.Context(), info.FullMethod) {
		return handler(srv, ss)
	}
	ctx, l := join(ss.Context())
	ss = l.joinStream(ctx, ss)
	if l.owner() {
		defer l.call.flush()
	}
	if s.perMessage {
		return s.perMessageStream(srv, ss, l, info.FullMethod, handler)
	}
	c := call{ctx: ss.Context(), method: info.FullMethod, state: l.call, stream: ss}
	d, refused := s.decide(&c, l)
	if refused != nil {
		return refused
	}
	if s.m.Holds() {
		defer s.m.Done(c.ctx, c, &d, nil, false)
		return handler(srv, ss)
	}
	err := handler(srv, ss)
	if s.m.GivesBack() {
		c.err = err
		s.m.Done(c.ctx, c, &d, err, l.refused.Load())
	}
	return err
}

// decide decides c, the call of l, and writes the decision's fields into
// the call's header. It returns the error a refused call is answered
// with, having told the interceptors before l, and sets the refusal's
// trailer. A call whose context is done is answered with its
// context's status and spends nothing: its client is gone, or its
// deadline has passed, so that no answer reaches it.
func (s *server) decide(c *call, l *link) (ratelimit.Decision, error) {
	if c.ctx.Err() != nil {
		// A MemoryCounter decides whatever the context says: it is not
		// asked.
		l.refuseEarlier(false)
		return ratelimit.Decision{}, contextStatus(c.ctx, nil)
	}
	d := s.m.Decide(c.ctx, *c)
	if errors.Is(d.Err, ratelimit.ErrContextDone) {
		l.refuseEarlier(false)
		return d, contextStatus(c.ctx, d.Err)
	}
	d.SetHeaders(l.call.header)
	if d.Allowed {
		return d, nil
	}
	l.refuseEarlier(false)
	return d, s.refuse(c, &d, false)
}

// refuse returns the error that the call c, refused by d, is answered
// with, and sets its trailer: the pushback, and, for a stream's message,
// d's fields.
func (s *server) refuse(c *call, d *ratelimit.Decision, message bool) error {
	if d.By == ratelimit.ByNone {
		return errUnavailable
	}
	c.setTrailer(refusalTrailer(d, message))
	if s.limitReached != nil {
		if err := s.limitReached(c.ctx, c.method, *d); err != nil {
			return err
		}
	}
	return refusal(d, s.m.Holds())
}
