package ratelimit

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/gatewaykit/ratelimit/internal/window"
)

// ProblemDetails is a LimitReached for HTTPMiddleware that answers a
// request over budget as RFC 9457 problem details
// (application/problem+json), with the "quota-exceeded" problem type of
// the RateLimit header fields draft and the policy the request violated:
//
//	{"type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
//	 "title": "Request cannot be satisfied as assigned quota has been exceeded",
//	 "status": 429, "detail": "...", "violated-policies": ["default"]}
//
// For a net/http gateway, which has no error handler to shape the answer;
// a Fiber app shapes the default *fiber.Error in its ErrorHandler. A
// LimitReached of your own that does more first (a log line, a header)
// ends with ProblemDetails.ServeHTTP(w, r).
var ProblemDetails http.Handler = http.HandlerFunc(problem)

// quotaExceeded is the draft's problem type.
const quotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// problem writes what ProblemDetails answers: the problem a refusal is.
func problem(w http.ResponseWriter, r *http.Request) {
	body := struct {
		Type     string   `json:"type"`
		Title    string   `json:"title"`
		Status   int      `json:"status"`
		Detail   string   `json:"detail,omitempty"`
		Violated []string `json:"violated-policies,omitempty"`
	}{Type: quotaExceeded, Title: "Request cannot be satisfied as assigned quota has been exceeded", Status: http.StatusTooManyRequests}
	if d, ok := DecisionFromContext(r.Context()); ok {
		body.Violated = []string{d.Policy}
		body.Detail = refusalDetail(&d, time.Now())
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusTooManyRequests)
	_ = json.NewEncoder(w).Encode(body)
}

// refusalDetail says why d refused, at now: the policy, its limit per
// window or calendar period, and when to retry, in seconds and as a date,
// `the "month" policy allows 150 per month; retry after 2449418 s
// (2027-01-01T00:00:00Z)`.
func refusalDetail(d *Decision, now time.Time) string {
	cal := d.calendar()
	per := d.Window.String()
	if cal != 0 {
		per = calendarNoun(cal)
	}
	detail := "the " + strconv.Quote(d.Policy) + " policy allows " + strconv.Itoa(d.Limit) + " per " + per
	if d.RetryAfter <= 0 {
		return detail
	}
	secs := window.CeilDiv(d.RetryAfter, time.Second)
	at := now.Add(time.Duration(secs) * time.Second).UTC().Truncate(time.Second)
	if cal != 0 {
		// The period's end, exactly, though the store's clock is a little
		// off this one's.
		_, at = cal.Period(now.Add(d.RetryAfter - time.Second))
	}
	return detail + "; retry after " + strconv.FormatInt(secs, 10) + " s (" + at.Format(time.RFC3339) + ")"
}

type contextDecision struct{}

// DecisionFromContext returns the Decision that refused the request whose
// context ctx is, for a LimitReached of HTTPMiddleware, and false in any
// other context.
func DecisionFromContext(ctx context.Context) (Decision, bool) {
	d, ok := ctx.Value(contextDecision{}).(*Decision)
	if !ok {
		return Decision{}, false
	}
	return *d, true
}
