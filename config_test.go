package ratelimit

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gatewaykit/ratelimit/store"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
)

// Config's setup: the values it refuses, naming the field, the bounds it
// takes, and the fields of Options it hands on to the Limiter.

func TestConfigPanics(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"zero limit", Config{Limit: 0, Window: time.Second}, "Limit"},
		{"negative IPv6 prefix", Config{Limit: 1, Window: time.Second, IPv6Prefix: -1}, "IPv6Prefix"},
		{"IPv6 prefix past 128", Config{Limit: 1, Window: time.Second, IPv6Prefix: 129}, "IPv6Prefix"},
		{"negative limit", Config{Limit: -1, Window: time.Second}, "Limit"},
		{"zero window", Config{Limit: 1, Window: 0}, "Window"},
		{"negative window", Config{Limit: 1, Window: -time.Second}, "Window"},
		{"nanosecond window", Config{Limit: 1, Window: time.Nanosecond}, "Window"},
		{"window under a millisecond", Config{Limit: 1, Window: 999 * time.Microsecond}, "Window"},
		{"year-long window", Config{Limit: 1, Window: 365 * 24 * time.Hour}, "Window"},
		{"window just over a day", Config{Limit: 1, Window: 24*time.Hour + time.Millisecond}, "Window"},
		{"negative store timeout", Config{Limit: 1, Window: time.Second, StoreTimeout: -1}, "StoreTimeout"},
		{"nanosecond store timeout", Config{Limit: 1, Window: time.Second, StoreTimeout: time.Nanosecond}, "StoreTimeout"},
		{"hour-long store timeout", Config{Limit: 1, Window: time.Second, StoreTimeout: time.Hour}, "StoreTimeout"},
		{"negative breaker failures", Config{Limit: 1, Window: time.Second, BreakerFailures: -1}, "BreakerFailures"},
		{"negative breaker cooldown", Config{Limit: 1, Window: time.Second, BreakerCooldown: -time.Second}, "BreakerCooldown"},
		{"day-long breaker cooldown", Config{Limit: 1, Window: time.Second, BreakerCooldown: 24 * time.Hour}, "BreakerCooldown"},
		{"negative fallback limit", Config{Limit: 1, Window: time.Second, Fallback: NewMemoryCounter(), FallbackLimit: -1}, "FallbackLimit"},
		{"fallback limit without fallback", Config{Limit: 1, Window: time.Second, FallbackLimit: 5}, "Fallback"},
		{"fallback limit above the limit", Config{Limit: 4, Window: time.Second, Fallback: NewMemoryCounter(), FallbackLimit: 5}, "FallbackLimit 5 is above Limit 4"},
		{"metrics used twice", Config{Limit: 1, Window: time.Second, Metrics: usedMetrics()}, "Metrics"},
		{"name too long", Config{Name: strings.Repeat("n", maxName+1), Limit: 1, Window: time.Second}, "Name"},
		{"name with a space", Config{Name: "two words", Limit: 1, Window: time.Second}, "Name"},
		{"name with a quote", Config{Name: `say"hi"`, Limit: 1, Window: time.Second}, "Name"},
		{"name with a backslash", Config{Name: `back\slash`, Limit: 1, Window: time.Second}, "Name"},
		{"name not ASCII", Config{Name: "café", Limit: 1, Window: time.Second}, "Name"},
		{"name with a control byte", Config{Name: "nul\x00", Limit: 1, Window: time.Second}, "Name"},
		// The counters' keys are already counted in by a handler with
		// Limit 10 per second, unnamed and named "route".
		{"another limit in the same keys", Config{Counter: claimedCounter(""), Limit: 11, Window: time.Second}, "Name"},
		{"another window in the same keys", Config{Counter: claimedCounter(""), Limit: 10, Window: time.Minute}, "Name"},
		{"another limit under the same name", Config{Counter: claimedCounter("route"), Name: "route", Limit: 3, Window: time.Second}, "Name"},
		{"another limit in the same Redis keys", Config{Counter: claimedRedisCounter(), Limit: 11, Window: time.Second}, "Name"},
		{"another algorithm in the same keys", Config{Counter: claimedCounter(""), Limit: 10, Window: time.Second, Algorithm: SlidingWindow}, "Name"},
		{"another burst in the same keys", Config{Counter: bucketCounter(5), Limit: 10, Window: time.Second, Algorithm: TokenBucket, Burst: 6}, "Burst 5"},
		{"plans in the same keys as none", Config{Counter: claimedCounter(""), Limit: 10, Window: time.Second, PlanFor: func(string) Plan { return Plan{} }}, "Name"},
		{"limit past 2^53", Config{Limit: 1<<53 + 1, Window: time.Second}, "Limit"},
		{"fallback limit past 2^53", Config{Limit: 1, Window: time.Second, Fallback: NewMemoryCounter(), FallbackLimit: 1<<53 + 1}, "FallbackLimit"},
		{"unknown algorithm", Config{Limit: 1, Window: time.Second, Algorithm: 4}, "Algorithm"},
		{"a token bucket on a counter of your own", Config{Counter: CounterStore(&fakeCounter{}), Limit: 1, Window: time.Second, Algorithm: TokenBucket}, "Counter"},
		{"in flight on a counter of your own", Config{Counter: CounterStore(&fakeCounter{}), Limit: 1, Window: time.Second, Algorithm: InFlight}, "Counter"},
		{"in flight with quotas", Config{Limit: 1, Window: time.Second, Algorithm: InFlight, Quotas: dayAndMonth(1, 1)}, "Quotas"},
		{"sliding window on a counter of your own", Config{Counter: CounterStore(&fakeCounter{}), Limit: 1, Window: time.Second, Algorithm: SlidingWindow}, "Counter"},
		{"sliding window with a fallback of your own", Config{Limit: 1, Window: time.Second, Algorithm: SlidingWindow, Fallback: CounterStore(&fakeCounter{})}, "Fallback"},
		{"cost on a counter of your own", Config{Counter: CounterStore(&fakeCounter{}), Limit: 1, Window: time.Second, Cost: func(*fiber.Ctx) int { return 2 }}, "Cost"},
		{"cost with a fallback of your own", Config{Limit: 1, Window: time.Second, Fallback: CounterStore(&fakeCounter{}), Cost: func(*fiber.Ctx) int { return 2 }}, "Fallback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				if !strings.HasPrefix(msg, "ratelimit: ") || !strings.Contains(msg, tt.field) {
					t.Fatalf("panic = %q, want a message starting %q that names %s", msg, "ratelimit: ", tt.field)
				}
			}()
			RateLimitShared(tt.cfg)
		})
	}
}

func usedMetrics() *Metrics {
	m := &Metrics{}
	RateLimitShared(Config{Limit: 1, Window: time.Second, Metrics: m})
	return m
}

// claimedCounter returns a MemoryCounter that a handler named name
// already counts in, with 10 per second.
func claimedCounter(name string) store.Store {
	c := NewMemoryCounter()
	RateLimitShared(Config{Counter: c, Name: name, Limit: 10, Window: time.Second})
	return c
}

// bucketCounter returns a MemoryCounter that an unnamed token bucket of
// 10 per second and burst counts in.
func bucketCounter(burst int) store.Store {
	c := NewMemoryCounter()
	RateLimitShared(Config{Counter: c, Limit: 10, Window: time.Second, Algorithm: TokenBucket, Burst: burst})
	return c
}

// claimedRedisCounter is claimedCounter's RedisCounter: setup makes no
// call, so its client needs no server.
func claimedRedisCounter() store.Store {
	c := NewRedisCounter(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	RateLimitShared(Config{Counter: c, Limit: 10, Window: time.Second})
	return c
}

// The bounds themselves are valid, and so are the zero values of the
// optional fields: each takes its default. Every function field is
// optional (nil takes the default), so no nil function is a mistake.
func TestConfigBoundsAreAccepted(t *testing.T) {
	for _, cfg := range []Config{
		{Limit: 1, Window: time.Millisecond},
		{Limit: 1, Window: 24 * time.Hour},
		{Limit: 1 << 53, Window: time.Second, StoreTimeout: time.Millisecond, BreakerCooldown: time.Millisecond},
		{Limit: 1, Window: time.Second, StoreTimeout: time.Minute, BreakerCooldown: time.Hour, BreakerFailures: 1},
		{Limit: 1, Window: time.Second, Fallback: NewMemoryCounter(), FallbackLimit: 1},
		{Limit: 1, Window: time.Second, Next: nil, Tenant: nil, LimitReached: nil, Counter: nil, Logger: nil},
	} {
		RateLimitShared(cfg)
	}
	l := newLimiter(Options{Limit: 7, Window: time.Second, Fallback: NewMemoryCounter()}, time.Now)
	if l.opts.StoreTimeout != 100*time.Millisecond || l.opts.BreakerFailures != 5 ||
		l.opts.BreakerCooldown != time.Second || l.fallbackPolicy.limit != 7 {
		t.Errorf("defaults: StoreTimeout %v, BreakerFailures %d, BreakerCooldown %v, FallbackLimit %d; want 100ms, 5, 1s, 7",
			l.opts.StoreTimeout, l.opts.BreakerFailures, l.opts.BreakerCooldown, l.fallbackPolicy.limit)
	}
}

func TestNewRedisCounterPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"nil client": func() { NewRedisCounter(nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				if !strings.HasPrefix(msg, "ratelimit: NewRedisCounter: ") {
					t.Fatalf("panic = %q, want a ratelimit: NewRedisCounter: message", msg)
				}
			}()
			f()
		})
	}
}

// TestConfigOptions checks that Config has every field of Options, and that
// RateLimitShared hands each on to its Limiter.
func TestConfigOptions(t *testing.T) {
	var cfg Config
	want := reflect.ValueOf(&Options{}).Elem()
	dst := reflect.ValueOf(&cfg).Elem()
	for i := range want.NumField() {
		f := want.Type().Field(i)
		cf, ok := dst.Type().FieldByName(f.Name)
		if !ok || cf.Type != f.Type {
			t.Fatalf("Config has no field %s %v, as Options does", f.Name, f.Type)
		}
		v := optionValue(t, f, i)
		want.Field(i).Set(v)
		dst.FieldByIndex(cf.Index).Set(v)
	}
	// Functions are equal only when nil, for DeepEqual: compare them by
	// address, then the rest.
	got := reflect.ValueOf(cfg.options())
	for i := range want.NumField() {
		g, w := got.Field(i), want.Field(i)
		if w.Kind() == reflect.Func {
			if g.Pointer() != w.Pointer() {
				t.Errorf("Config.options().%s is not Config.%[1]s", want.Type().Field(i).Name)
			}
			continue
		}
		if !reflect.DeepEqual(g.Interface(), w.Interface()) {
			t.Errorf("Config.options().%s = %v, want %v", want.Type().Field(i).Name, g, w)
		}
	}
}

// optionValue is a value of Options' field f, the i-th, that is not its
// zero value, distinct per field.
func optionValue(t *testing.T, f reflect.StructField, i int) reflect.Value {
	t.Helper()
	v := reflect.New(f.Type).Elem()
	switch f.Type.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(i + 1))
	case reflect.Uint8:
		v.SetUint(uint64(i + 1))
	case reflect.String:
		v.SetString(f.Name)
	case reflect.Pointer:
		v.Set(reflect.New(f.Type.Elem()))
	case reflect.Interface:
		v.Set(reflect.ValueOf(NewMemoryCounter()))
	case reflect.Func:
		v.Set(reflect.MakeFunc(f.Type, func([]reflect.Value) []reflect.Value { panic("not called") }))
	case reflect.Slice:
		v.Set(reflect.MakeSlice(f.Type, 1, 1))
	default:
		t.Fatalf("Options.%s: no test value for a %v", f.Name, f.Type)
	}
	return v
}

// FiberMiddleware takes the budget and the rest from its Limiter: a
// Config with any field of Options set panics, naming that field, and a
// Config with none set does not.
func TestFiberMiddlewareNamesALimiterField(t *testing.T) {
	lim := NewLimiter(Options{Limit: 1, Window: time.Minute})
	FiberMiddleware(lim, Config{Next: func(*fiber.Ctx) bool { return false }, AnonymousByIP: true}) // no panic
	opts := reflect.TypeFor[Options]()
	for i := range opts.NumField() {
		f := opts.Field(i)
		var cfg Config
		reflect.ValueOf(&cfg).Elem().FieldByName(f.Name).Set(optionValue(t, f, i))
		if msg := panicOf(func() { FiberMiddleware(lim, cfg) }); !strings.Contains(msg, "Config."+f.Name+" is set") {
			t.Errorf("Config with %s set: panic %q, want one naming Config.%[1]s", f.Name, msg)
		}
	}
}
