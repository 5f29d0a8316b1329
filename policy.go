package ratelimit

import (
	"strconv"
	"time"
)

// A policy is a budget that a limiter decides requests against, as the
// response reports it: the limiter's own (Options.Limit per
// Options.Window) and its fallback's (Options.FallbackLimit).

// headerSwitches are the header families a limiter writes.
type headerSwitches struct {
	legacy bool // X-RateLimit-*
	draft  bool // RateLimit-Policy and RateLimit
}

// policyHeaders is one policy, with the header values that never change
// formatted once.
type policyHeaders struct {
	headerSwitches
	limit      int64
	policy     string // the policy's name: Options.Name, or "default"
	limitValue string // X-RateLimit-Limit
	policyItem string // the item of RateLimit-Policy: "name";q=limit;w=window
	name       string // the policy's name as an sf-string: "name"

	// limitValue and policyItem for fasthttp, which copies bytes.
	limitBytes, policyItemBytes []byte
}

func newPolicyHeaders(name string, limit int, window time.Duration, h headerSwitches) policyHeaders {
	if name == "" {
		name = "default"
	}
	// keyPrefix has checked that the name needs no escaping.
	quoted := `"` + name + `"`
	p := policyHeaders{
		headerSwitches: h,
		limit:          int64(limit),
		policy:         name,
		limitValue:     strconv.Itoa(limit),
		policyItem:     quoted + ";q=" + strconv.Itoa(limit) + ";w=" + strconv.FormatInt(ceilDiv(window, time.Second), 10),
		name:           quoted,
	}
	p.limitBytes, p.policyItemBytes = []byte(p.limitValue), []byte(p.policyItem)
	return p
}
