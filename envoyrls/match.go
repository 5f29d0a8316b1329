package envoyrls

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/gatewaykit/ratelimit"
)

// rules is a checked configuration, compiled for matching: every
// domain's tree, and its rules in the configuration's order.
type rules struct {
	domains map[string]*node
	all     []*rule
}

// keyValue is a request entry's key and value, which a descriptor with
// a value matches exactly.
type keyValue struct{ key, value string }

// A node is one descriptor of a domain's tree, or the domain's root.
//
// A node's children are looked up as the reference looks them up, with
// one difference: the reference joins an entry's key and value into one
// string ("key_value") and compares that, so that a descriptor keyed
// "a_b" without a value, or a wildcard "a_b*", can match an entry keyed
// "a"; here an entry matches only descriptors of its own key. That keeps
// a rule's tenant, made of values alone, apart from another key's. A key
// that ends in '*' is likewise a key like any other here, not a wildcard
// over keys.
type node struct {
	// exact are the children with a value, by key and value: those whose
	// value ends in '*' too, which an entry of that very value matches.
	exact map[keyValue]*node
	// wild are the children whose value ends in '*', in the
	// configuration's order.
	wild []*node
	// bare are the children without a value, by key.
	bare map[string]*node

	// key and prefix are a wildcard's key and its value without the '*'.
	key, prefix string

	// rule is the node's rule; nil without rate_limit.
	rule *rule

	// named tells, for each level of the path from the root to the node,
	// whether the request's value at that level names the tenant: it
	// does where a descriptor without a value, or a wildcard without
	// share_threshold, matched it. nnamed counts the true ones.
	named  []bool
	nnamed int
}

// tenantEscaper escapes a value for the tenant, whose values are joined
// by '/'.
var tenantEscaper = strings.NewReplacer("%", "%25", "/", "%2F")

// Units that sliding_window and token_bucket take for rate_limit: a
// window of at most 24 hours.
var windowUnits = map[rlsv3.RateLimitResponse_RateLimit_Unit]bool{
	rlsv3.RateLimitResponse_RateLimit_SECOND: true,
	rlsv3.RateLimitResponse_RateLimit_MINUTE: true,
	rlsv3.RateLimitResponse_RateLimit_HOUR:   true,
	rlsv3.RateLimitResponse_RateLimit_DAY:    true,
}

const (
	// maxLimits is how many entries limits: may have, as the library
	// allows a limiter as many quotas beside its main limit.
	maxLimits = 4
	// maxBurst is the largest burst the library takes.
	maxBurst = 1 << 53
	// maxNameLen is the longest rule name that is not hashed, as the
	// library takes a limiter's name.
	maxNameLen = 64
)

// compile checks cfgs and builds the rules. An error names the domain,
// the descriptor's path (its keys and values as "key_value", or
// "descriptors[i]" for one without a key) and what is wrong; compile
// never returns a partial result.
func compile(cfgs []Config) (*rules, error) {
	rs := &rules{domains: make(map[string]*node, len(cfgs))}
	names := make(map[string]string) // rule name → whose it is
	for i := range cfgs {
		c := &cfgs[i]
		if c.Domain == "" {
			return nil, fmt.Errorf("envoyrls: configuration %d of %d: empty domain (domain:)", i+1, len(cfgs))
		}
		if _, dup := rs.domains[c.Domain]; dup {
			return nil, fmt.Errorf("envoyrls: %s: duplicate domain: two configurations name it", c.Domain)
		}
		b := builder{rs: rs, domain: c.Domain, names: names}
		root := &node{}
		if err := b.level(root, c.Descriptors, nil, nil); err != nil {
			return nil, err
		}
		rs.domains[c.Domain] = root
	}
	return rs, nil
}

// builder builds one domain's tree.
type builder struct {
	rs     *rules
	domain string
	names  map[string]string
}

// errorf is an error of the descriptor at where in b's domain.
func (b *builder) errorf(where, format string, args ...any) error {
	return fmt.Errorf("envoyrls: %s: %s: %s", b.domain, where, fmt.Sprintf(format, args...))
}

// level builds parent's children from ds. path are the final keys of
// the descriptors from the root to parent, and named tells for each of
// them whether its value names the tenant.
func (b *builder) level(parent *node, ds []Descriptor, path []string, named []bool) error {
	seen := make(map[string]bool, len(ds))
	for i := range ds {
		d := &ds[i]
		if d.Key == "" {
			where := fmt.Sprintf("descriptors[%d]", i)
			if len(path) > 0 {
				where = strings.Join(path, ".") + "." + where
			}
			return b.errorf(where, "empty key (key:)")
		}
		// finalKey is the reference's: siblings whose finalKey is the
		// same are refused as the reference refuses them.
		finalKey := d.Key
		if d.Value != "" {
			finalKey += "_" + d.Value
		}
		p := append(path[:len(path):len(path)], finalKey)
		where := strings.Join(p, ".")
		if seen[finalKey] {
			return b.errorf(where, "duplicate descriptor composite key '%s.%s' among its siblings", b.domain, where)
		}
		seen[finalKey] = true

		wildcard := strings.HasSuffix(d.Value, "*")
		if d.ShareThreshold && !wildcard {
			return b.errorf(where, "share_threshold can only be used with a wildcard value (ending with '*'), but the value is %q", d.Value)
		}
		n := &node{named: append(named[:len(named):len(named)], d.Value == "" || wildcard && !d.ShareThreshold)}
		for _, v := range n.named {
			if v {
				n.nnamed++
			}
		}
		switch {
		case d.Value == "":
			if parent.bare == nil {
				parent.bare = make(map[string]*node)
			}
			parent.bare[d.Key] = n
		default:
			if parent.exact == nil {
				parent.exact = make(map[keyValue]*node)
			}
			parent.exact[keyValue{d.Key, d.Value}] = n
			if wildcard {
				n.key, n.prefix = d.Key, strings.TrimSuffix(d.Value, "*")
				parent.wild = append(parent.wild, n)
			}
		}

		if d.RateLimit == nil {
			if err := b.noRateLimit(d, where); err != nil {
				return err
			}
		} else {
			r, err := b.rule(d, where)
			if err != nil {
				return err
			}
			n.rule = r
		}
		if err := b.level(n, d.Descriptors, p, n.named); err != nil {
			return err
		}
	}
	return nil
}

// noRateLimit checks that d, which has no rate_limit, has none of this
// server's fields that qualify one.
func (b *builder) noRateLimit(d *Descriptor, where string) error {
	if fs := ownFields(d); len(fs) > 0 {
		return b.errorf(where, "%s needs a rate_limit", fs[0])
	}
	return nil
}

// ownFields names this server's fields that d sets.
func ownFields(d *Descriptor) []string {
	var fs []string
	if d.Algorithm != "" {
		fs = append(fs, "algorithm")
	}
	if d.Burst != 0 {
		fs = append(fs, "burst")
	}
	if d.Limits != nil {
		fs = append(fs, "limits")
	}
	if d.Leases {
		fs = append(fs, "leases")
	}
	return fs
}

// parseUnit reads a unit's name, in any case; ok is false for none
// valid, UNKNOWN among them.
func parseUnit(s string) (u rlsv3.RateLimitResponse_RateLimit_Unit, ok bool) {
	v, ok := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(s)]
	if !ok || v == int32(rlsv3.RateLimitResponse_RateLimit_UNKNOWN) {
		return 0, false
	}
	return rlsv3.RateLimitResponse_RateLimit_Unit(v), true
}

// unitError says what is wrong with a unit that parseUnit refused.
func unitError(field, unit string) string {
	if unit == "" {
		return field + ": missing unit (want SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR)"
	}
	return fmt.Sprintf("%s: invalid unit %q (want SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR, in any case)", field, unit)
}

// rule checks d, which has a rate_limit, and builds its rule.
func (b *builder) rule(d *Descriptor, where string) (*rule, error) {
	rl := d.RateLimit
	var unit rlsv3.RateLimitResponse_RateLimit_Unit
	if rl.Unlimited {
		if rl.Unit != "" {
			return nil, b.errorf(where, "rate_limit: unlimited should not specify a unit, but unit is %q", rl.Unit)
		}
	} else {
		var ok bool
		if unit, ok = parseUnit(rl.Unit); !ok {
			return nil, b.errorf(where, "%s", unitError("rate_limit", rl.Unit))
		}
	}
	var replaces []string
	for i, r := range rl.Replaces {
		if r.Name == "" {
			return nil, b.errorf(where, "rate_limit.replaces[%d]: empty name", i)
		}
		if r.Name == rl.Name {
			return nil, b.errorf(where, "rate_limit.replaces[%d]: %q is this descriptor's own name: a limit cannot replace itself", i, r.Name)
		}
		replaces = append(replaces, r.Name)
	}

	var algo ratelimit.Algorithm
	var suffix string
	switch d.Algorithm {
	case "", "fixed_window":
		algo = ratelimit.FixedWindow
	case "sliding_window":
		algo, suffix = ratelimit.SlidingWindow, "~sliding"
	case "token_bucket":
		algo, suffix = ratelimit.TokenBucket, "~bucket"
	default:
		return nil, b.errorf(where, "algorithm %q: want fixed_window, sliding_window or token_bucket", d.Algorithm)
	}
	if rl.Unlimited {
		if fs := ownFields(d); len(fs) > 0 {
			return nil, b.errorf(where, "%s needs a rate_limit that is not unlimited", fs[0])
		}
	}
	if d.Burst != 0 && algo != ratelimit.TokenBucket {
		return nil, b.errorf(where, "burst is for algorithm token_bucket only")
	}
	if d.Burst > maxBurst {
		return nil, b.errorf(where, "burst %d: want at most 2^53", d.Burst)
	}
	if algo != ratelimit.FixedWindow && !windowUnits[unit] {
		return nil, b.errorf(where, "rate_limit: unit %s with algorithm %s: want SECOND, MINUTE, HOUR or DAY", unit, d.Algorithm)
	}
	if len(d.Limits) > maxLimits {
		return nil, b.errorf(where, "limits: %d entries: want at most %d", len(d.Limits), maxLimits)
	}

	r := &rule{
		limitName: rl.Name,
		replaces:  replaces,
		unlimited: rl.Unlimited,
		shadow:    d.ShadowMode,
		algorithm: algo,
		leases:    d.Leases,
	}
	if !rl.Unlimited {
		r.limits = make([]limit, 0, 1+len(d.Limits))
		r.limits = append(r.limits, limit{unit: unit, perUnit: rl.RequestsPerUnit, burst: d.Burst})
		for i, l := range d.Limits {
			field := fmt.Sprintf("limits[%d]", i)
			u, ok := parseUnit(l.Unit)
			if !ok {
				return nil, b.errorf(where, "%s", unitError(field, l.Unit))
			}
			for _, prev := range r.limits {
				if prev.unit == u {
					return nil, b.errorf(where, "%s: two limits per %s", field, u)
				}
			}
			r.limits = append(r.limits, limit{unit: u, perUnit: l.RequestsPerUnit})
		}
	}

	r.path = b.domain + "." + where
	r.name = ruleName(r.path + suffix)
	if other, dup := b.names[r.name]; dup {
		return nil, b.errorf(where, "its counts would be named %q, as those of %s are: rename a key, a value or the domain", r.name, other)
	}
	b.names[r.name] = fmt.Sprintf("%s in domain %q", where, b.domain)
	b.rs.all = append(b.rs.all, r)
	return r, nil
}

// ruleName is s when the library takes it as a limiter's name (at most
// 64 bytes of visible ASCII without '"' or '\'), and otherwise "envoy-"
// and the first 24 hexadecimal digits of its SHA-256.
func ruleName(s string) string {
	ok := len(s) <= maxNameLen
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = c >= '!' && c <= '~' && c != '"' && c != '\\'
	}
	if ok {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "envoy-" + hex.EncodeToString(sum[:12])
}

// match finds the rule that a request descriptor's entries reach in
// domain, and the tenant: the values that name the descriptor's own
// count under the rule, those that a descriptor without a value or a
// wildcard without share_threshold matched, each with '%' escaped as
// "%25" and '/' as "%2F", joined by '/'. A rule whose path fixes every
// value has the tenant "".
//
// At each level an entry matches the child of its key and value, else
// the first wildcard child, in the configuration's order, of its key
// whose prefix starts its value, else the child of its key without a
// value. Only the node that the last entry reaches applies. match
// returns nil when no rule does: an unknown domain, no entries, an entry
// that matches nothing, a node without rate_limit, or more entries than
// the tree is deep. It allocates nothing but the tenant, and that only
// when it joins or escapes values.
func (rs *rules) match(domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry) (r *rule, tenant string) {
	n := rs.domains[domain]
	if n == nil || len(entries) == 0 {
		return nil, ""
	}
	last := len(entries) - 1
	for i, e := range entries {
		n = n.child(e.GetKey(), e.GetValue())
		if n == nil {
			return nil, ""
		}
		if i == last {
			if n.rule == nil {
				return nil, ""
			}
			return n.rule, n.tenant(entries)
		}
		if n.exact == nil && n.bare == nil {
			return nil, "" // a leaf before the last entry
		}
	}
	return nil, ""
}

// child is the child of n that an entry of key and value matches; nil
// for none.
func (n *node) child(key, value string) *node {
	if c := n.exact[keyValue{key, value}]; c != nil {
		return c
	}
	for _, w := range n.wild {
		if w.key == key && strings.HasPrefix(value, w.prefix) {
			return w
		}
	}
	return n.bare[key]
}

// tenant joins the values of entries that name the tenant at n.
func (n *node) tenant(entries []*ratelimitv3.RateLimitDescriptor_Entry) string {
	switch n.nnamed {
	case 0:
		return ""
	case 1:
		for i, named := range n.named {
			if named {
				return tenantEscaper.Replace(entries[i].GetValue())
			}
		}
	}
	size := n.nnamed - 1
	for i, named := range n.named {
		if named {
			size += len(entries[i].GetValue())
		}
	}
	var sb strings.Builder
	sb.Grow(size)
	first := true
	for i, named := range n.named {
		if !named {
			continue
		}
		if !first {
			sb.WriteByte('/')
		}
		first = false
		sb.WriteString(tenantEscaper.Replace(entries[i].GetValue()))
	}
	return sb.String()
}
