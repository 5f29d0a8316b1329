// Package envoyrls is Envoy's rate limit service (RLS v3) on the
// ratelimit library: a ShouldRateLimit server for Envoy, Istio and
// Contour (Envoy Gateway runs a service of its own), built on
// ratelimit.Limiters, so that every replica of the service decides every
// descriptor exactly, on one Redis.
//
// It reads envoyproxy/ratelimit's configuration as it is (domain, nested
// descriptors with key and optional value, rate_limit with unit,
// requests_per_unit, unlimited, name and replaces, shadow_mode), and adds
// what the reference cannot, beside rate_limit: a sliding window or a
// token bucket with a burst (algorithm, burst), further limits decided
// all or nothing with rate_limit's (limits), leases for hot descriptors
// (leases); and it counts DAY, WEEK, MONTH and YEAR as periods of the UTC
// calendar. See Descriptor.
//
//	srv := envoyrls.NewServer(envoyrls.Options{Store: ratelimit.NewRedisCounter(rdb)})
//	if err := srv.Watch(ctx, "ratelimit.yaml", time.Second); err != nil {
//		log.Fatal(err)
//	}
//	g := grpc.NewServer()
//	srv.Register(g)
//	g.Serve(ln)
//
// The command github.com/gatewaykit/ratelimit/envoyrls/cmd/ratelimit-rls
// runs it, with a health service and Prometheus metrics.
//
// # How a call is decided
//
// Each descriptor finds its rule as the reference finds it: at each level
// of the tree, the entry's exact value first, then the first wildcard
// value ("prefix*"), then the key without a value; a rule applies only to
// a descriptor that ends at it. The entries' values that the rule does
// not fix (a key without a value, a wildcard without share_threshold)
// name the descriptor's own count under the rule, its tenant.
//
// A descriptor costs its own hits_addend when set (0: it reads, spending
// nothing, and is OVER_LIMIT when nothing is left), else the request's (0
// meaning 1). With is_negative_hits it gives its hits_addend back, into
// the windows now running, never below nothing spent
// (ratelimit.Limiter.GiveBack). The descriptors of one request are
// decided at once, and all or nothing: the answer is OVER_LIMIT when any
// descriptor is, and then what the others took is given back, so that a
// refused request spends nothing. Each status, in the request's order,
// reports the limit that decided its descriptor: current_limit (the
// limit of a descriptor's several that refused, or when allowed that has
// the fewest units left), limit_remaining and duration_until_reset.
//
// A rule with unlimited answers OK with limit_remaining 4294967295,
// counting nothing; a limit of 0 refuses any cost without asking the
// store; shadow_mode counts and answers OK; a rule whose name another
// rule of the same request replaces is left out, counting nothing; a
// descriptor that no rule matches answers OK. A store that fails is
// decided as Options say: OK (failing open, as Envoy does), OVER_LIMIT
// (FailClosed), or by a Fallback, within Options.StoreTimeout.
//
// # Reloads
//
// Server.Load replaces the configuration while the server decides, and
// Server.Watch loads a file or a directory again whenever it changes. A
// rule counts under keys named by its domain and the path of keys and
// values that reach it, never by its limits or the configuration's
// version, so a reload keeps every count: a tenant that spent 2 of 3 has
// 2 more of a new limit of 4. A configuration that does not load changes
// nothing, and the error (the log, for Watch) says why.
//
// docs/envoy.md in the repository says how Envoy, Istio and Contour point
// at the service, where it answers otherwise than envoyproxy/ratelimit,
// and how to move from it.
package envoyrls
