package redisstore

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Lua that decides a round trip (the files of lua/, take.lua first
// to read), and how a counter's servers run it.
//
// Redis 7 and later, and Valkey, load it once as a FUNCTION library and
// call its functions by name (FCALL): the library's functions are made
// when it loads, and a call runs only the code of its keys' kinds. A
// server that has lost the library (a restart without persistence, a
// FUNCTION FLUSH, a replica promoted before it had it) answers that it
// has no such function, having run nothing; the counter loads the
// library on that server and sends the call again.
//
// Redis 6.0 has no FUNCTION. A server that knows no FCALL, or a user
// whose ACL grants scripts but not FCALL or FUNCTION LOAD, has the
// counter send the same text as an EVAL script from then on: by digest
// (EVALSHA), and with its body when the server lacks it (NOSCRIPT); see
// evalOf. The counter learns which from the servers' answers, never from
// their version.
//
// The library's name and its functions' carry the digest of its text, so
// that two versions of this package (a rolling deploy) never call each
// other's functions: each loads its own, as each sends its own script by
// its own digest.

//go:embed lua/*.lua
var luaFiles embed.FS

// luaOrder is the order of the files in the text: each uses only what
// those before it define, and take.lua dispatches to them all.
var luaOrder = [...]string{
	"args.lua", "calendar.lua", "windows.lua", "bucket.lua", "inflight.lua",
	"settle.lua", "usage.lua", "quotas.lua", "take.lua",
}

// luaText is the files of lua/, one after the other, ending with take.
var luaText = func() string {
	var b strings.Builder
	for _, name := range luaOrder {
		text, err := luaFiles.ReadFile("lua/" + name)
		if err != nil {
			panic(err) // embedded: it is there
		}
		b.Write(text)
		b.WriteString("\n")
	}
	return b.String()
}()

var (
	luaDigest = digest(luaText)

	// takeFunction decides, gives back and resets; readFunction reads a
	// usage. It writes nothing, so the server runs it even when it is at
	// its maxmemory, as it ran the EVAL script that wrote nothing.
	takeFunction = "ratelimit_take_" + luaDigest
	readFunction = "ratelimit_read_" + luaDigest

	libraryText = "#!lua name=ratelimit_" + luaDigest + "\n" + luaText +
		"redis.register_function('" + takeFunction + "', take)\n" +
		"redis.register_function{function_name = '" + readFunction + "', callback = take, flags = {'no-writes'}}\n"

	// evalText is the same as an EVAL script, for a server that cannot
	// run the library.
	evalText = evalOf(luaText)
	evalSHA  = redis.NewScript(evalText).Hash()
)

// digest names a version of the Lua: 12 hex digits of its text's SHA-1.
func digest(lua string) string {
	sum := sha1.Sum([]byte(lua))
	return hex.EncodeToString(sum[:6])
}

// evalOf returns lua, the files of lua/ one after the other, as an EVAL
// script that runs take on the call's KEYS and ARGV.
//
// An EVAL script runs its whole text on every call, and so would make
// its 36 functions and its tables anew each time, and leave them to the
// garbage collector: on Redis 6.0 that tripled a fixed window's time
// (2.3 µs to 8.3 µs). So the script keeps take, and with it every
// function take reaches, in Lua's globals, under a name that carries the
// digest of lua: the first call on a server makes them, later calls find
// them, as FCALL finds a library's. Redis keeps scripts from creating
// globals by a metatable on _G, which rawget and rawset pass by; the
// value is the same for every call of the same text, and SCRIPT FLUSH,
// which empties the Lua state, drops it with the scripts. Redis 7 and
// later make the globals read-only (and have redis.REDIS_VERSION_NUM, as
// 6.x has not): there, for a user who may not run FCALL, every call
// makes them again.
func evalOf(lua string) string {
	name := "'ratelimit_" + digest(lua) + "'"
	return "local take = rawget(_G, " + name + ")\n" +
		"if not take then\n" +
		"  take = (function()\n" + lua + "  return take\n  end)()\n" +
		"  if redis.REDIS_VERSION_NUM == nil then pcall(rawset, _G, " + name + ", take) end\n" +
		"end\n" +
		"return take(KEYS, ARGV)\n"
}

// verb is how a call of the Lua is sent.
type verb int8

const (
	fcall    verb = iota // the library's function, by name
	evalsha              // the EVAL script, by digest
	evalBody             // the EVAL script, with its body
)

// args returns the first arguments of a call of the Lua on n keys: the
// command, the function or script, and n.
func (v verb) args(function string, n int) (any, any, any) {
	switch v {
	case evalsha:
		return "evalsha", evalSHA, n
	case evalBody:
		return "eval", evalText, n
	}
	return "fcall", function, n
}

// resends is how many times a call that ran nothing is sent again, at
// most: the script by its digest after FCALL, then its body; or FCALL
// after a load, once more should the library go again meanwhile.
const resends = 3

// verb is how the next call is sent: by FCALL, until a server could not
// run the library (ns.eval).
func (ns *nodes) verb() verb {
	if ns.eval.Load() {
		return evalsha
	}
	return fcall
}

// retry tells whether a call of the Lua on key that failed with err,
// having run nothing, is to be sent again, and then how; it loads the
// library first where that is what the server lacks. A server that
// cannot run the library gets the script by its digest first, as the
// counter's every later call: a server that has it runs it, and one
// that refuses the client answers as to any call (NOAUTH), not to a
// body too long for a client it has not authenticated. A load that fails
// other than by refusal returns its error, for the call's.
func (ns *nodes) retry(ctx context.Context, err error, key string) (again bool, v verb, failed error) {
	switch {
	case redis.HasErrorPrefix(err, "NOSCRIPT"):
		return true, evalBody, nil
	case refusesFunctions(err):
		ns.eval.Store(true)
		return true, evalsha, nil
	case !functionMissing(err):
		return false, 0, nil
	}
	switch err := ns.load(ctx, key); {
	case err == nil:
		return true, fcall, nil
	case refusesFunctions(err):
		ns.eval.Store(true)
		return true, evalsha, nil
	default:
		return false, 0, err
	}
}

// load loads the library on the server of key. A library of the same
// name is the same text, loaded by another call meanwhile. On a cluster
// or a ring it goes through the client of that server: the cluster or
// ring client would send a command without keys to any one of them, so
// hooks added to it do not see this one (docs/redis.md says so).
func (ns *nodes) load(ctx context.Context, key string) error {
	var c redis.Cmdable = ns.rdb
	var err error
	switch {
	case ns.ring != nil:
		c, err = ns.ring.GetShardClientForKey(key)
	case ns.cluster != nil:
		c, err = ns.cluster.MasterForKey(ctx, key)
	}
	if err != nil {
		return err
	}
	err = c.FunctionLoad(ctx, libraryText).Err()
	if err != nil && strings.Contains(err.Error(), "already exists") {
		return nil
	}
	return err
}

// functionMissing reports whether err is a server's answer that it has
// no function of the name called.
func functionMissing(err error) bool {
	return strings.HasPrefix(serverError(err), "ERR Function not found")
}

// refusesFunctions reports whether err is a server's refusal to call or
// load a function at all: it knows no such command (Redis 6), or the
// user may not run it.
func refusesFunctions(err error) bool {
	msg := strings.ToLower(refusal(err))
	return strings.Contains(msg, "fcall") || strings.Contains(msg, "function")
}

// refusal is the text of err when it is a server's refusal to run a
// command at all: the user may not (NOPERM), or the server knows no such
// command; else "".
func refusal(err error) string {
	msg := serverError(err)
	if strings.HasPrefix(msg, "NOPERM") || strings.HasPrefix(msg, "ERR unknown command") {
		return msg
	}
	return ""
}

// serverError is the text of err when a server sent it, else "".
func serverError(err error) string {
	if e, ok := errors.AsType[redis.Error](err); ok {
		return e.Error()
	}
	return ""
}
