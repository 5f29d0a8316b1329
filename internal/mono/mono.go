// Package mono is the process's monotonic clock, read as the time since
// one epoch: the limiter's real clock and the engines count from it.
package mono

import "time"

// Epoch is where the clock counts from: when the process started.
var Epoch = time.Now()

// Now is the time since Epoch, read on the monotonic clock.
func Now() time.Duration { return time.Since(Epoch) }
