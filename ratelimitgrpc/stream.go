// A stream counted per message (Config.PerMessage): each message the
// handler receives is decided as a call of its own.

package ratelimitgrpc

import (
	"errors"
	"net/http"

	"google.golang.org/grpc"

	"github.com/gatewaykit/ratelimit"
)

// perMessageStream serves the stream ss, of the interceptor l, whose
// messages are counted each on its own.
func (s *server) perMessageStream(srv any, ss grpc.ServerStream, l *link, method string, handler grpc.StreamHandler) error {
	ms := &messageStream{ServerStream: ss, s: s, l: l, method: method}
	l.giveBackMessage = ms.giveBack
	err := handler(srv, ms)
	ms.finish()
	return err
}

// messageStream is the stream a handler counted per message receives
// from. gRPC lets one goroutine at a time call RecvMsg, so its fields
// need no lock.
type messageStream struct {
	grpc.ServerStream
	s      *server
	l      *link
	method string

	// last is the decision of the last message allowed; took, that it
	// holds what that message took, which a later limiter's refusal of
	// the message gives back.
	last    ratelimit.Decision
	decided bool
	took    bool
	// refusal, once a message is refused, is what every RecvMsg returns:
	// the stream has ended.
	refusal error
}

// RecvMsg receives the next message into m and decides it. A refused
// message is not handed on: RecvMsg returns the refusal instead, and
// again on every later call.
func (w *messageStream) RecvMsg(m any) error {
	if w.refusal != nil {
		return w.refusal
	}
	if err := w.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	c := call{ctx: w.Context(), method: w.method, req: m, state: w.l.call, stream: w.ServerStream}
	if c.ctx.Err() != nil {
		w.end(contextStatus(c.ctx, nil))
		return w.refusal
	}
	d := w.s.m.Decide(c.ctx, c)
	switch {
	case errors.Is(d.Err, ratelimit.ErrContextDone):
		w.end(contextStatus(c.ctx, d.Err))
	case d.Allowed:
		w.last, w.decided, w.took = d, true, true
		return nil
	default:
		w.end(w.s.refuse(&c, &d, true))
	}
	return w.refusal
}

// end ends the stream with err, the refusal of its last message, which
// the interceptors before this one give back.
func (w *messageStream) end(err error) {
	w.refusal, w.took = err, false
	w.l.refuseEarlier(true)
}

// giveBack gives back what the last message took: a limiter after this
// one refused it.
func (w *messageStream) giveBack() {
	if w.took {
		w.took = false
		w.s.m.Done(w.Context(), call{ctx: w.Context(), method: w.method, state: w.l.call}, &w.last, nil, true)
	}
}

// finish reports the last message's decision in the trailer of a stream
// that no refusal ended: gRPC metadata is per stream, not per message,
// and the header has usually gone before the messages arrive.
func (w *messageStream) finish() {
	if w.refusal != nil || !w.decided {
		return
	}
	h := http.Header{}
	w.last.SetHeaders(h)
	if len(h) > 0 {
		w.ServerStream.SetTrailer(toMetadata(h))
	}
}
