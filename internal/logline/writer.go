package logline

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"time"
)

// A log's lines reach its handler through a writer: a goroutine of the
// log's own, started when a line comes and gone when none waits, that
// writes them one at a time, in order. The caller of Write waits until the
// handler has written its line, as a plain slog call would, unless the
// handler is stuck: once it has spent StuckAfter on one line, the callers
// waiting for it go on, and later ones do not wait, until it returns.
//
// A handler can block for as long as its sink does: standard error into a
// pipe that nobody reads on a loaded machine, a full disk, a log shipper
// that is down. Written on the request's own goroutine, a line then held
// the request that had it to write for minutes, whatever StoreTimeout
// said; and a go-redis line (RedisLogger) held go-redis's goroutine, which
// writes some of its lines under a lock of its own (the failover client
// logs a new primary under the lock that every dial of it takes). Lines
// are one a second at most per kind, so the writer costs a goroutine a
// second at most, and a handler that never returns holds one goroutine,
// and maxQueued lines, per log.

const (
	// StuckAfter is how long the handler may spend on one line before the
	// writer takes it for stuck. A handler of a file or a terminal takes
	// microseconds.
	StuckAfter = 50 * time.Millisecond
	// maxQueued is how many lines wait for a stuck handler at most; more
	// are not written, and count as held back (Log.Suppressed).
	maxQueued = 16
)

type writer struct {
	mu      sync.Mutex
	queue   []*line
	running bool          // a goroutine is writing the queue
	stuck   chan struct{} // closed once the line being written has taken StuckAfter; replaced when it is done
}

// line is a record on its way to its handler.
type line struct {
	h    slog.Handler
	rec  slog.Record
	done chan struct{}
}

// write has f's handler write a line said at at, and waits for it unless
// the handler is stuck.
func (w *writer) write(f *Log, at time.Time, level slog.Level, msg string, attrs []slog.Attr) {
	logger := f.output()
	if !logger.Enabled(context.Background(), level) {
		return
	}
	var pc [1]uintptr
	runtime.Callers(3, pc[:]) // the caller of Write, Record or Say, as slog would name it
	ln := &line{h: logger.Handler(), rec: slog.NewRecord(at, level, msg, pc[0]), done: make(chan struct{})}
	ln.rec.AddAttrs(attrs...)

	w.mu.Lock()
	if len(w.queue) == maxQueued {
		w.mu.Unlock()
		f.Suppressed.Add(1)
		return
	}
	if w.stuck == nil {
		w.stuck = make(chan struct{})
	}
	stuck := w.stuck
	w.queue = append(w.queue, ln)
	if !w.running {
		w.running = true
		go w.run()
	}
	w.mu.Unlock()
	select {
	case <-ln.done:
	case <-stuck:
	}
}

// run writes the queue's lines until none is left.
func (w *writer) run() {
	for {
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.running = false
			w.queue = nil
			w.mu.Unlock()
			return
		}
		ln := w.queue[0]
		w.queue = w.queue[1:]
		stuck := w.stuck
		w.mu.Unlock()

		t := time.AfterFunc(StuckAfter, func() { close(stuck) })
		_ = ln.h.Handle(context.Background(), ln.rec)
		close(ln.done)
		if !t.Stop() {
			// It was stuck and is back: the next line gets its own
			// StuckAfter.
			w.mu.Lock()
			w.stuck = make(chan struct{})
			w.mu.Unlock()
		}
	}
}
