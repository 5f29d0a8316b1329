package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatewaykit/ratelimit/internal/testkit/redistest"
	"github.com/gatewaykit/ratelimit/store"
)

// What a server's answer says about running the Lua, as each server
// words it.
func TestAnswersAboutRunningTheLua(t *testing.T) {
	for _, tt := range []struct {
		err                         string
		missing, noFunctions, noLua bool
	}{
		{"ERR Function not found", true, false, false},
		{"ERR unknown command 'fcall', with args beginning with: 'ratelimit_take_0a' '1' ", false, true, false}, // Redis 6.0
		{"ERR unknown command `FCALL`, with args beginning with: `ratelimit_take_0a`, ", false, true, false},
		{"NOPERM this user has no permissions to run the 'fcall' command", false, true, false},
		{"NOPERM User lim has no permissions to run the 'function|load' command", false, true, false},
		{"ERR unknown command 'evalsha', with args beginning with: ", false, false, true},
		{"NOPERM this user has no permissions to run the 'evalsha' command", false, false, true},
		{"NOPERM this user has no permissions to access one of the keys used as arguments", false, false, false},
		{"NOSCRIPT No matching script. Please use EVAL.", false, false, false},
		{"ERR Error running script (call to f_1a): @user_script:7: function arguments expected", false, false, false},
	} {
		err := serverAnswer(tt.err)
		if got := functionMissing(err); got != tt.missing {
			t.Errorf("%q: function missing %v, want %v", tt.err, got, tt.missing)
		}
		if got := refusesFunctions(err); got != tt.noFunctions {
			t.Errorf("%q: refuses functions %v, want %v", tt.err, got, tt.noFunctions)
		}
		if got := refusesScripts(err); got != tt.noLua {
			t.Errorf("%q: refuses scripts %v, want %v", tt.err, got, tt.noLua)
		}
	}
}

// A server that loses the library (FUNCTION FLUSH, as a restart without
// persistence does) has it loaded again by the next call, which counts
// on where the counts were: the counter stays on FCALL. Redis 6.0 runs
// the Lua as a script throughout.
func TestLibraryLoadsAgainWhenLost(t *testing.T) {
	rdb := redistest.Client(t)
	ctx := context.Background()
	s := New(rdb)
	key := uniqueKey(t, "lost")
	incr := func(want int64) {
		t.Helper()
		if n, err := s.Incr(ctx, key, time.Minute); n != want || err != nil {
			t.Fatalf("Incr = %d, %v; want %d", n, err, want)
		}
	}
	incr(1)
	noFunctions := rdb.FunctionList(ctx, redis.FunctionListQuery{}).Err() != nil
	if got := s.nodes.eval.Load(); got != noFunctions {
		t.Fatalf("the counter runs the Lua as a script: %v; the server has no FUNCTION: %v", got, noFunctions)
	}
	if noFunctions {
		// Redis 6.0: the script keeps take in Lua's globals, under the
		// digest of its text, after its first call (evalOf); SCRIPT
		// FLUSH drops it with the script, and the next call, sent
		// again with the body, keeps it again.
		kept := func(want string) {
			t.Helper()
			got, err := rdb.Eval(ctx, "return type(rawget(_G, 'ratelimit_"+luaDigest+"'))", nil).Text()
			if err != nil || got != want {
				t.Fatalf("the take kept in the server's globals: %q, %v; want %q", got, err, want)
			}
		}
		kept("function")
		if err := rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		kept("nil")
		incr(2)
		kept("function")
		return
	}
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "ratelimit_" + luaDigest}).Result()
	if err != nil || len(libs) != 1 || len(libs[0].Functions) != 2 {
		t.Fatalf("the server's library ratelimit_%s: %v, %v; want one, of two functions", luaDigest, libs, err)
	}
	if err := rdb.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	incr(2)
	if err := rdb.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// A read, outside any batch, through the function that writes nothing.
	r := store.Request{Budget: &store.Budget{Limit: 10, Window: time.Minute}}
	var counts [1]store.Count
	res := store.Result{Counts: counts[:]}
	if err := s.Read(ctx, key, &r, &res); err != nil || res.Counts[0].N != 2 {
		t.Fatalf("Read after a flush = %+v, %v; want a count of 2", res.Counts[0], err)
	}
	incr(3)
	if s.nodes.eval.Load() {
		t.Error("a lost library turned the counter to scripts")
	}
	if list, _ := rdb.FunctionList(ctx, redis.FunctionListQuery{}).Result(); len(list) != 1 || !strings.HasPrefix(list[0].Name, "ratelimit_") {
		t.Errorf("the server's libraries after two flushes: %v; want ours, once", list)
	}
}
