package ratelimit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func BenchmarkZZTake(b *testing.B) {
	for _, mode := range []string{"shared", "disjoint"} {
		b.Run(mode, func(b *testing.B) {
			l := NewLimiter(Options{Limit: 1 << 30, Window: time.Minute, Counter: NewMemoryCounter()})
			keys := make([]string, 10000)
			for i := range keys {
				keys[i] = "tenant" + strconv.Itoa(i)
				l.Take(context.Background(), keys[i])
			}
			ctx := context.Background()
			var g atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				id := int(g.Add(1)) - 1
				i := id * 7919
				for pb.Next() {
					var k string
					if mode == "shared" {
						k = keys[i%len(keys)]
					} else {
						k = keys[(i%5000)*2+id%2]
					}
					if !l.Take(ctx, k).Allowed {
						b.Fatal("refused")
					}
					i++
				}
			})
		})
	}
}
