// What the interceptors of this package on one call share: the rate
// limit fields they all write, sent once as the call's header metadata,
// and word of a refusal, for the interceptors before the refusing one to
// give back what they took.

package ratelimitgrpc

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// callState is what every interceptor of this package on a call shares.
// Several limiters may decide one call, and Decision.SetHeaders merges
// each one's fields with those an earlier one wrote (one list in
// RateLimit-Policy, the most restrictive X-RateLimit-*), which needs them
// in one http.Header; gRPC's own header metadata only appends. So the
// limiters write into header, and the first of them sends it once, before
// the handler's first header or message or when the call ends.
type callState struct {
	// header holds the fields the limiters wrote. They write it before
	// the handler runs, and flush reads it after.
	header http.Header

	mu sync.Mutex
	// stream takes the call's header metadata; nil when there is no
	// stream (an interceptor called directly, in a test).
	stream  headerSetter
	flushed bool
	// sent is the metadata the handler set, header and trailer, for
	// CostAfter.
	sent metadata.MD
}

// headerSetter is what sets a call's header metadata: its
// grpc.ServerTransportStream, or its grpc.ServerStream.
type headerSetter interface{ SetHeader(metadata.MD) error }

// flush sets the fields the limiters wrote as the call's header metadata,
// once.
func (c *callState) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flushed || c.stream == nil {
		return
	}
	c.flushed = true
	if len(c.header) > 0 {
		_ = c.stream.SetHeader(toMetadata(c.header)) // fails only once the call has ended
	}
}

// record keeps md, set by the handler, for CostAfter.
func (c *callState) record(md metadata.MD) {
	c.mu.Lock()
	c.sent = metadata.Join(c.sent, md)
	c.mu.Unlock()
}

// handlerMetadata returns what the handler set so far, header and
// trailer.
func (c *callState) handlerMetadata() metadata.MD {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent.Copy()
}

// toMetadata returns the fields of h under lower-case keys, as gRPC
// metadata has them.
func toMetadata(h http.Header) metadata.MD {
	md := make(metadata.MD, len(h))
	for k, v := range h {
		md[lowerName(k)] = v
	}
	return md
}

// lowerNames holds the lower-case form of each field name the limiters
// have written: a handful (see ratelimit.Decision.SetHeaders), lowered
// once rather than on every call.
var lowerNames sync.Map

func lowerName(k string) string {
	if v, ok := lowerNames.Load(k); ok {
		return v.(string)
	}
	v := strings.ToLower(k)
	lowerNames.Store(k, v)
	return v
}

// link is one interceptor of this package on a call, linked to the one
// before it on the same call, if any.
type link struct {
	prev *link
	call *callState
	// own is the call's state when l is its first interceptor: one
	// allocation for both.
	own callState
	// refused: an interceptor after this one refused the call, or the
	// stream, when it opened.
	refused atomic.Bool
	// giveBackMessage, for a stream counted per message, gives back what
	// the last message took, which an interceptor after this one refused.
	giveBackMessage func()
}

type linkKey struct{}

// join returns ctx with a link of a new interceptor on its call, after
// the call's earlier ones.
func join(ctx context.Context) (context.Context, *link) {
	prev, _ := ctx.Value(linkKey{}).(*link)
	l := &link{prev: prev}
	if prev != nil {
		l.call = prev.call
	} else {
		l.own.header = http.Header{}
		l.call = &l.own
	}
	return context.WithValue(ctx, linkKey{}, l), l
}

// owner reports whether l is the first of its call's interceptors, which
// made its callState and sends its header.
func (l *link) owner() bool { return l.prev == nil }

// refuseEarlier tells the call's interceptors before l that l refused
// the call, or one of its stream's messages: each gives back what it
// took for it.
func (l *link) refuseEarlier(message bool) {
	for e := l.prev; e != nil; e = e.prev {
		switch {
		case !message:
			e.refused.Store(true)
		case e.giveBackMessage != nil:
			e.giveBackMessage()
		}
	}
}

// unaryOwner has the first interceptor of a unary call send the fields
// on the call's stream, and see what the handler sets there: ctx's
// grpc.ServerTransportStream is wrapped.
func (l *link) unaryOwner(ctx context.Context) context.Context {
	ts := grpc.ServerTransportStreamFromContext(ctx)
	if ts == nil {
		return ctx
	}
	l.call.stream = ts
	return grpc.NewContextWithServerTransportStream(ctx, &transportStream{ServerTransportStream: ts, call: l.call})
}

// transportStream is a call's grpc.ServerTransportStream, through which
// grpc.SetHeader, SendHeader and SetTrailer reach it: it records what
// the handler sets, and sends the limiters' fields before the handler's
// own header.
type transportStream struct {
	grpc.ServerTransportStream
	call *callState
}

func (s *transportStream) SetHeader(md metadata.MD) error {
	s.call.record(md)
	return s.ServerTransportStream.SetHeader(md)
}

func (s *transportStream) SendHeader(md metadata.MD) error {
	s.call.record(md)
	s.call.flush()
	return s.ServerTransportStream.SendHeader(md)
}

func (s *transportStream) SetTrailer(md metadata.MD) error {
	s.call.record(md)
	return s.ServerTransportStream.SetTrailer(md)
}

// joinStream returns ss as the stream interceptor of l passes it on: its
// Context carries l, and for the first interceptor of the call it sends
// the limiters' fields before the handler's first header or message, and
// records what the handler sets.
func (l *link) joinStream(ctx context.Context, ss grpc.ServerStream) grpc.ServerStream {
	if !l.owner() {
		return &contextStream{ServerStream: ss, ctx: ctx}
	}
	l.call.stream = ss
	if ts := grpc.ServerTransportStreamFromContext(ctx); ts != nil {
		ctx = grpc.NewContextWithServerTransportStream(ctx, &transportStream{ServerTransportStream: ts, call: l.call})
	}
	return &headerStream{contextStream: contextStream{ServerStream: ss, ctx: ctx}, call: l.call}
}

// contextStream is a grpc.ServerStream with a context of its own.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }

// headerStream is the stream the first interceptor of this package on a
// stream passes on (see joinStream).
type headerStream struct {
	contextStream
	call *callState
}

func (s *headerStream) SetHeader(md metadata.MD) error {
	s.call.record(md)
	return s.ServerStream.SetHeader(md)
}

func (s *headerStream) SendHeader(md metadata.MD) error {
	s.call.record(md)
	s.call.flush()
	return s.ServerStream.SendHeader(md)
}

func (s *headerStream) SetTrailer(md metadata.MD) {
	s.call.record(md)
	s.ServerStream.SetTrailer(md)
}

func (s *headerStream) SendMsg(m any) error {
	s.call.flush()
	return s.ServerStream.SendMsg(m)
}
