// Package headerfield reads the rate limit header fields that an earlier
// limiter wrote into a response, for a later one on the same request to
// write its own against them: a count, and which kind of limit an item of
// RateLimit-Policy (draft-ietf-httpapi-ratelimit-headers-11) is.
package headerfield

// Count parses a field value of decimal digits, as the limiters write
// their counts and seconds.
func Count[T string | []byte](b T) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// InFlight reports whether policies, a RateLimit-Policy field, makes the
// limit of X-RateLimit-Limit limit one of requests at once: whether its
// items of q=limit say qu="concurrent-requests", as an InFlight limiter's
// do, and none of them is a rate. An item is a quoted name, which holds
// no '"' but may hold any other visible byte (';' and ',' among them),
// then its parameters; a value past what the limiters write ends the
// reading.
func InFlight[T string | []byte](limit, policies T) bool {
	if !hasQu(policies) {
		return false // rates alone: the usual answer, found in one pass
	}
	n, ok := Count(limit)
	inFlight := false
	for ok {
		for len(policies) > 0 && policies[0] == ' ' {
			policies = policies[1:]
		}
		if len(policies) == 0 || policies[0] != '"' {
			break
		}
		i := 1
		for i < len(policies) && policies[i] != '"' {
			i++
		}
		policies = policies[min(i+1, len(policies)):]
		q, slots := int64(-1), false
		for len(policies) > 0 && policies[0] == ';' {
			j := 1
			for j < len(policies) && policies[j] != ';' && policies[j] != ',' {
				j++
			}
			switch p := policies[1:j]; {
			case len(p) > 2 && p[0] == 'q' && p[1] == '=':
				if v, ok := Count(p[2:]); ok {
					q = v
				}
			case string(p) == `qu="concurrent-requests"`:
				slots = true
			}
			policies = policies[j:]
		}
		if q == n && !slots {
			return false // a rate's
		}
		inFlight = inFlight || q == n
		ok = len(policies) > 0 && policies[0] == ','
		if ok {
			policies = policies[1:]
		}
	}
	return inFlight
}

// hasQu reports whether b holds ";qu=", which every item of a limit in
// flight does.
func hasQu[T string | []byte](b T) bool {
	for i := 3; i < len(b); i++ {
		if b[i] == '=' && b[i-1] == 'u' && b[i-2] == 'q' && b[i-3] == ';' {
			return true
		}
	}
	return false
}
