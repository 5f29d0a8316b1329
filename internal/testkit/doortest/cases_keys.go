// The table's cases on the keys requests count under: by tenant, anonymous
// or by client address, and by limiter name.

package doortest

var keyCases = []tableCase{
	{"each tenant has its own key", func(r *run) {
		o := r.opts(1)
		send := r.serve(Settings{Options: o})
		r.expect("acme", send(request{tenant: "acme"}), 200, nil)
		r.expect("globex", send(request{tenant: "globex"}), 200, nil)
		r.expect("acme again", send(request{tenant: "acme"}), 429, nil)
		// A refused request spends nothing.
		if n := r.count(o.Counter, r.key("acme")); n != 1 {
			r.t.Errorf("%s counted %d, want 1", r.key("acme"), n)
		}
		if n := r.count(o.Counter, r.key("globex")); n != 1 {
			r.t.Errorf("%s counted %d, want 1", r.key("globex"), n)
		}
	}},
	{"anonymous requests share unknown", func(r *run) {
		o := r.opts(2)
		send := r.serve(Settings{Options: o})
		r.expect("first client", send(request{client: "203.0.113.1"}), 200, nil)
		r.expect("second client", send(request{client: "203.0.113.2"}), 200, nil)
		r.expect("third client", send(request{client: "203.0.113.3"}), 429, nil)
		if n := r.count(o.Counter, r.key("unknown")); n != 2 {
			r.t.Errorf("%s counted %d, want 2", r.key("unknown"), n)
		}
	}},
	{"anonymous requests by client address", func(r *run) {
		o := r.opts(1)
		send := r.serve(Settings{Options: o, AnonymousByIP: true})
		r.expect("IPv4 client", send(request{client: "203.0.113.1"}), 200, nil)
		r.expect("IPv4 client again", send(request{client: "203.0.113.1"}), 429, nil)
		r.expect("another IPv4 client", send(request{client: "203.0.113.2"}), 200, nil)
		r.expect("IPv6 client", send(request{client: "2001:db8:1:2::1"}), 200, nil)
		r.expect("same /64", send(request{client: "2001:db8:1:2:ffff::9"}), 429, nil)
		r.expect("another /64", send(request{client: "2001:db8:1:3::1"}), 200, nil)
		r.expect("a tenant is keyed by tenant", send(request{tenant: "acme", client: "203.0.113.1"}), 200, nil)
		for key, want := range map[string]int64{
			r.key("#ip:203.0.113.1"):          1,
			r.key("#ip:2001:db8:1:2::/64"):    1,
			r.key("unknown"):                  0,
			r.key("acme"):                     1,
			r.key("#ip:2001:db8:1:3::/64"):    1,
			r.key("#ip:2001:db8:1:2:ffff::9"): 0,
		} {
			if n := r.count(o.Counter, key); n != want {
				r.t.Errorf("%s counted %d, want %d", key, n, want)
			}
		}
	}},
	{"named limiters on one counter", func(r *run) {
		o := r.opts(1)
		strict := o
		strict.Name += "-strict"
		global := r.serve(Settings{Options: o})
		route := r.serve(Settings{Options: strict})
		r.expect("global", global(request{tenant: "acme"}), 200, map[string]string{"RateLimit-Policy": `"` + o.Name + `";q=1;w=60`})
		r.expect("route", route(request{tenant: "acme"}), 200, map[string]string{"RateLimit-Policy": `"` + strict.Name + `";q=1;w=60`})
		r.expect("global again", global(request{tenant: "acme"}), 429, nil)
		if n := r.count(o.Counter, "rl:"+strict.Name+"#acme"); n != 1 {
			r.t.Errorf("the route's key counted %d, want 1", n)
		}
	}},
}
