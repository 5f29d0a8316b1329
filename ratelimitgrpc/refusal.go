// What a refused call is answered with: its status and details, the
// pushback trailer, and the status of a call that could not be decided.

package ratelimitgrpc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gatewaykit/ratelimit"
)

// pushbackKey is the trailer of gRFC A6 by which a server tells a
// client's retry policy when to retry, in milliseconds, or not to (a
// negative value).
const pushbackKey = "grpc-retry-pushback-ms"

// errUnavailable answers a call that nothing could count under
// Options.FailClosed. Its text names no store, key or error: those are
// for the Limiter's log.
var errUnavailable = status.Error(codes.Unavailable, "service unavailable")

// refusal returns the status of a call that d refused over budget:
// ResourceExhausted, with RetryInfo when a call of the same cost fits
// later, and a QuotaFailure naming the limit that refused it. inFlight
// says the limit counts calls at once, not per window.
func refusal(d *ratelimit.Decision, inFlight bool) error {
	v := &errdetails.QuotaFailure_Violation{
		Subject:     d.Policy,
		QuotaId:     d.Policy,
		QuotaValue:  int64(d.Limit),
		Description: describe(d, inFlight),
	}
	st := status.New(codes.ResourceExhausted, "rate limit exceeded")
	var err error
	if d.RetryAfter > 0 {
		st, err = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)},
			&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{v}})
	} else {
		st, err = st.WithDetails(&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{v}})
	}
	if err != nil {
		// Marshalling these messages cannot fail; were it to, the code
		// alone still refuses.
		return status.Error(codes.ResourceExhausted, "rate limit exceeded")
	}
	return st.Err()
}

// describe says the limit of d in words a client's developer reads.
func describe(d *ratelimit.Decision, inFlight bool) string {
	if inFlight {
		return fmt.Sprintf("limit %q: %d at once", d.Policy, d.Limit)
	}
	return fmt.Sprintf("limit %q: %d per %s", d.Policy, d.Limit, seconds(d.Window))
}

// seconds formats w as whole seconds ("60s") when it is, as the RateLimit
// fields count it, and as time.Duration does otherwise.
func seconds(w time.Duration) string {
	if w%time.Second == 0 {
		return strconv.FormatInt(int64(w/time.Second), 10) + "s"
	}
	return w.String()
}

// pushback is the value of the pushback trailer for a refusal by d:
// RetryAfter in milliseconds, rounded up, or -1, do not retry, for a call
// whose cost never fits.
func pushback(d *ratelimit.Decision) string {
	if d.RetryAfter <= 0 {
		return "-1"
	}
	return strconv.FormatInt(int64((d.RetryAfter+time.Millisecond-1)/time.Millisecond), 10)
}

// refusalTrailer returns the trailer of a refusal by d: the pushback,
// with, when extra, d's rate limit fields (a stream's message, refused
// once the header is gone).
func refusalTrailer(d *ratelimit.Decision, extra bool) metadata.MD {
	md := metadata.MD{}
	if extra {
		h := http.Header{}
		d.SetHeaders(h)
		md = toMetadata(h)
	}
	md.Set(pushbackKey, pushback(d))
	return md
}

// contextStatus returns the status of a call whose context ended, as
// cause (a Decision's Err, or nil) says when ctx does not say it yet (a
// deadline passed by the limiter's clock): Canceled or DeadlineExceeded.
func contextStatus(ctx context.Context, cause error) error {
	err := ctx.Err()
	switch {
	case err != nil:
	case errors.Is(cause, context.DeadlineExceeded):
		err = context.DeadlineExceeded
	default:
		err = context.Canceled
	}
	return status.FromContextError(err).Err()
}
