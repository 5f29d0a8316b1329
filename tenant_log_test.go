package ratelimit

import (
	"encoding/json"
	"errors"
	"github.com/gatewaykit/ratelimit/internal/testkit/syncbuf"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
)

// logLines are the lines written to b.
func logLines(b *syncbuf.Buffer) []string {
	s := strings.TrimSpace(b.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// A tenant ID is client-controlled more often than it should be. Written
// into a log line it must stay one quoted value, not become lines or fields
// of its own, with either of slog's handlers.
func TestLogLinesCannotBeForged(t *testing.T) {
	forged := "acme\nlevel=ERROR msg=\"forged\" key=rl:admin\n{\"level\":\"ERROR\",\"msg\":\"forged\"}\" tenant=\"x"
	for _, tt := range []struct {
		name    string
		handler func(io.Writer) slog.Handler
		check   func(t *testing.T, line string)
	}{
		{"text", func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, nil) }, func(t *testing.T, line string) {
			// With the two quoted values taken out, what is left must be
			// the line's own fields, once each.
			rest := line
			for _, attr := range []string{"tenant=" + strconv.Quote(forged), "key=" + strconv.Quote(tenantKey(forged))} {
				if !strings.Contains(rest, attr) {
					t.Fatalf("line lacks %s as one quoted value: %s", attr, line)
				}
				rest = strings.Replace(rest, attr, "", 1)
			}
			for _, field := range []string{"level=", "msg=", "err="} {
				if strings.Count(rest, field) != 1 {
					t.Errorf("%q appears %d times outside the quoted values: %s", field, strings.Count(rest, field), line)
				}
			}
			if strings.Contains(rest, "tenant=") || strings.Contains(rest, "forged") {
				t.Errorf("forged text outside the quoted values: %s", rest)
			}
		}},
		{"json", func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, nil) }, func(t *testing.T, line string) {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("line is not one JSON object: %v: %s", err, line)
			}
			if m["tenant"] != forged || m["key"] != tenantKey(forged) || m["msg"] != "ratelimit: counter failed, request decided by fail open" {
				t.Errorf("tenant %q, key %q, msg %q: fields altered", m["tenant"], m["key"], m["msg"])
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs syncbuf.Buffer
			app := newApp(RateLimitShared(Config{
				Counter: CounterStore(&fakeCounter{err: errors.New("dial tcp 10.0.0.7:6379: refused")}), Limit: 1, Window: time.Minute,
				Logger: slog.New(tt.handler(&logs)),
				Tenant: func(*fiber.Ctx) (string, bool) { return forged, true },
			}), nil)
			get(t, app, "")
			lines := logLines(&logs)
			if len(lines) != 1 {
				t.Fatalf("one failure wrote %d lines, want 1:\n%s", len(lines), strings.Join(lines, "\n"))
			}
			tt.check(t, lines[0])
		})
	}
}

// A long tenant ID is cut in the log; its key still tells it apart.
func TestLogBoundsLongTenantIDs(t *testing.T) {
	logs := newLogRecorder()
	id := strings.Repeat("x", 1<<20)
	app := newApp(RateLimitShared(Config{
		Counter: CounterStore(&fakeCounter{err: errors.New("down")}), Limit: 1, Window: time.Minute,
		Logger: logs.logger(),
		Tenant: func(*fiber.Ctx) (string, bool) { return id, true },
	}), nil)
	get(t, app, "")
	lines := logs.lines()
	if len(lines) != 1 {
		t.Fatalf("log = %v, want one line", lines)
	}
	size := len(lines[0].msg)
	for _, v := range lines[0].attrs {
		size += len(v.String())
	}
	if size > 1024 {
		t.Errorf("the line's message and values take %d bytes, want under 1 KiB", size)
	}
	if got, want := lines[0].str("tenant"), id[:maxTenantKey]+"... (1048576 bytes)"; got != want {
		t.Errorf("tenant = %q, want the ID cut, with its length: %q", got, want)
	}
	if got := lines[0].str("key"); got != tenantKey(id) {
		t.Errorf("key = %q, want the digest key %q", got, tenantKey(id))
	}
}
