package ratelimitgrpc_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gatewaykit/ratelimit"
	"github.com/gatewaykit/ratelimit/ratelimitgrpc"
)

// serveHealth serves the health service behind opts on a loopback port,
// and returns a client of it and a function that stops both.
func serveHealth(server []grpc.ServerOption, client ...grpc.DialOption) (healthgrpc.HealthClient, func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(server...)
	healthgrpc.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), append(client, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	return healthgrpc.NewHealthClient(conn), func() { conn.Close(); srv.Stop() }
}

// A server whose tenants may make one call a minute: the second call is
// refused, with when to retry and which limit refused it.
func ExampleUnaryServerInterceptor() {
	lim := ratelimit.NewLimiter(ratelimit.Options{Name: "api", Limit: 1, Window: time.Minute})
	client, stop := serveHealth([]grpc.ServerOption{
		grpc.UnaryInterceptor(ratelimitgrpc.UnaryServerInterceptor(lim, ratelimitgrpc.Config{})),
	})
	defer stop()

	// Metadata is the client's word: in production, read the tenant from
	// what your authentication verified (Config.Tenant).
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant-id", "acme")
	for range 2 {
		var header metadata.MD
		_, err := client.Check(ctx, &healthgrpc.HealthCheckRequest{}, grpc.Header(&header))
		st := status.Convert(err)
		fmt.Println(st.Code(), header.Get("ratelimit"))
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Println("retry in", d.GetRetryDelay().AsDuration().Round(time.Second))
			case *errdetails.QuotaFailure:
				fmt.Println("limit", d.GetViolations()[0].GetQuotaId()+":", d.GetViolations()[0].GetDescription())
			}
		}
	}
	// Output:
	// OK ["api";r=0;t=60]
	// ResourceExhausted ["api";r=0;t=60]
	// retry in 1m0s
	// limit api: limit "api": 1 per 60s
}

// A client that keeps its calls to 10 a second, one at a time: each call
// after the first waits 100 ms for its turn. Processes whose Limiters
// share a RedisCounter keep to the rate between them.
func ExampleUnaryClientInterceptor() {
	lim := ratelimit.NewLimiter(ratelimit.Options{
		Name: "upstream", Limit: 10, Window: time.Second, Algorithm: ratelimit.TokenBucket, Burst: 1,
	})
	client, stop := serveHealth(nil, grpc.WithUnaryInterceptor(ratelimitgrpc.UnaryClientInterceptor(lim, ratelimitgrpc.Config{})))
	defer stop()

	start := time.Now()
	for range 3 {
		if _, err := client.Check(context.Background(), &healthgrpc.HealthCheckRequest{}); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("3 calls; waited at least 200 ms:", time.Since(start) >= 200*time.Millisecond)
	// Output:
	// 3 calls; waited at least 200 ms: true
}
