package main

import (
	"context"
	"log"
	"net"
	"time"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/ratelimitgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
)

var tenants = map[string]string{"key-acme": "acme", "key-globex": "globex"}

func main() {
	lim := ratelimit.NewLimiter(ratelimit.Options{Limit: 5, Window: time.Minute})
	limit := ratelimitgrpc.UnaryServerInterceptor(lim, ratelimitgrpc.Config{
		Tenant: func(ctx context.Context, _ string) (string, bool) { // authentication
			if key := metadata.ValueFromIncomingContext(ctx, "x-api-key"); len(key) == 1 {
				t, ok := tenants[key[0]]
				return t, ok
			}
			return "", false
		},
	})
	srv := grpc.NewServer(grpc.UnaryInterceptor(limit))
	healthgrpc.RegisterHealthServer(srv, health.NewServer())
	reflection.Register(srv)
	lis, err := net.Listen("tcp", "127.0.0.1:50051")
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(srv.Serve(lis))
}
