package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// Ping checks that the limiter's store works. A gateway calls it at
// start-up, before it serves. It decides a request on a key of the
// limiter's own that no tenant has ("rl:#ping", or under its Name), in
// its algorithm, with its Options.Quotas, at a limit of 1. A RedisCounter
// first checks that Redis can be reached on every server its client
// knows, and accepts the client's credentials and database; the request
// then checks that the server lets it run what the limiter runs. The
// error carries the server's own words (NOAUTH, WRONGPASS, NOPERM, an
// unknown database) and what to fix: a misconfigured store then fails
// the deployment, rather than fail open request after request. ctx
// bounds the check.
//
// A limiter whose tenants may have quotas (Options.Quotas, or PlanFor,
// whose plans may sell them) on a Redis that keeps nothing across a
// restart, neither AOF nor RDB snapshots (CONFIG GET appendonly and
// save), has Ping warn of it, once, in one log line that names the fix:
// a restart of that Redis gives every tenant its month back (see
// docs/redis.md, "Persistence"). A server that does not answer CONFIG
// GET is not warned of.
func (l *Limiter) Ping(ctx context.Context) error {
	var err error
	if l.info.Ping != nil {
		err = l.info.Ping(ctx)
	}
	if err == nil {
		err = l.probeStore(ctx)
	}
	if m, ok := errors.AsType[misconfigured](err); ok {
		return fmt.Errorf("ratelimit: the counter failed its check: %w; to fix: %s", err, m.Fix())
	}
	if err != nil {
		return fmt.Errorf("ratelimit: the counter failed its check: %w", err)
	}
	l.warnVolatile(ctx)
	return nil
}

// warnVolatile says once, at warning level, that the Redis the limiter
// counts quotas in keeps nothing across a restart, and what to do.
func (l *Limiter) warnVolatile(ctx context.Context) {
	if l.quotas == nil && l.opts.PlanFor == nil || l.info.Volatile == nil || l.saidVolatile.Load() {
		return
	}
	servers := l.info.Volatile(ctx)
	if len(servers) == 0 || !l.saidVolatile.CompareAndSwap(false, true) {
		return
	}
	l.failures.Write(slog.LevelWarn, "ratelimit: Redis keeps nothing across a restart (neither AOF nor RDB snapshots), "+
		"so a restart of it gives every tenant its quotas back: a spent month starts again from zero",
		slog.String("fix", "turn on persistence in Redis: appendonly yes (appendfsync everysec), or RDB snapshots (save 60 1000); see docs/redis.md, Persistence"),
		slog.Any("servers", servers))
}

// probeStore takes on the probe's key, of the probe's plan: a limit of 1
// per millisecond, and the quotas' commands too, on keys of the probe's
// own (at a limit of 1, a month's key holds 1 until the month ends).
func (l *Limiter) probeStore(ctx context.Context) error {
	r := getRequest(l.probe, "", l.clock.Now())
	defer r.free()
	r.Key = appendProbeKey(r.key[:0], l.prefix, l.opts.Algorithm)
	r.Deadline, _ = ctx.Deadline()
	if r.Algorithm == InFlight {
		r.Slot = slotSeq.Add(1)
	}
	res := r.result()
	err := l.store.Take(ctx, &r.Request, res)
	if err == nil && res.Counted {
		l.countsByTransaction()
	}
	return err
}
