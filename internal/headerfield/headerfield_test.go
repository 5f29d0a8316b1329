package headerfield

import (
	"strconv"
	"testing"
)

func TestCount(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"42", 42, true}, {"999999999999999999", 999999999999999999, true},
		{"", 0, false}, {"-1", 0, false}, {"1.5", 0, false}, {" 1", 0, false}, {"many", 0, false},
		{"1000000000000000000", 0, false}, // 19 digits: past what a limiter writes
	} {
		n, ok := Count(tt.in)
		if n != tt.want || ok != tt.ok {
			t.Errorf("Count(%q) = %d, %v; want %d, %v", tt.in, n, ok, tt.want, tt.ok)
		}
		if bn, bok := Count([]byte(tt.in)); bn != n || bok != ok {
			t.Errorf("Count([]byte(%q)) = %d, %v; want as the string's", tt.in, bn, bok)
		}
	}
}

func TestInFlight(t *testing.T) {
	const slots = `"a";q=2;qu="concurrent-requests"`
	for _, tt := range []struct {
		name, limit, policies string
		want                  bool
	}{
		{"a limit in flight", "2", slots, true},
		{"a rate", "2", `"a";q=2;w=60`, false},
		{"a rate, then a limit in flight of another limit", "2", `"r";q=10;w=60, ` + slots, true},
		{"a limit in flight, then a rate of another limit", "2", slots + `, "r";q=10;w=60`, true},
		{"a limit in flight between rates of other limits", "2", `"r";q=10;w=60, ` + slots + `, "s";q=20;w=60`, true},
		{"a limit in flight of another limit", "10", slots, false},
		{"a rate and a limit in flight of the same limit", "2", slots + `, "r";q=2;w=60`, false},
		{"two limits in flight", "2", slots + `, "b";q=2;qu="concurrent-requests"`, true},
		{"no RateLimit-Policy", "2", "", false},
		{"no X-RateLimit-Limit", "", slots, false},
		{"a name that holds a rate's parameters", "2", `"x;q=2;w=60, y";q=2;qu="concurrent-requests"`, true},
		{"a name that holds a limit in flight's", "2", `"x;q=2;qu=concurrent-requests";q=2;w=60`, false},
		{"a third party's value", "2", `2 per minute`, false},
		{"an item unended", "2", `"a`, false},
		{"an item without a quote, after one in flight", "2", slots + `, a;q=2;w=60`, true},
		{"a q that is no count", "2", `"a";q=x;qu="concurrent-requests"`, false},
	} {
		if got := InFlight(tt.limit, tt.policies); got != tt.want {
			t.Errorf("%s: InFlight(%q, %q) = %v, want %v", tt.name, tt.limit, tt.policies, got, tt.want)
		}
		if got := InFlight([]byte(tt.limit), []byte(tt.policies)); got != tt.want {
			t.Errorf("%s: InFlight of bytes = %v, want %v", tt.name, got, tt.want)
		}
	}
	// Many items: the one of the limit, wherever it is.
	p := ""
	for i := range 20 {
		p += `"r` + strconv.Itoa(i) + `";q=` + strconv.Itoa(100+i) + `;w=60, `
	}
	if !InFlight("2", p+slots) {
		t.Errorf("InFlight after 20 rates = false, want true")
	}
}
