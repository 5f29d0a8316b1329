package ratelimitgrpc_test

// The scaffolding the tests share: a real gRPC server on a loopback port,
// the interop TestService behind it, and a client of it.

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// service is the TestService behind the interceptors. unary, when set,
// answers UnaryCall; otherwise it answers "ok". StreamingInputCall
// receives every message and answers how many bytes came; FullDuplexCall
// echoes each message.
type service struct {
	testgrpc.UnimplementedTestServiceServer
	unary func(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error)
}

func (s *service) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if s.unary != nil {
		return s.unary(ctx, req)
	}
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: []byte("ok")}}, nil
}

func (s *service) StreamingInputCall(stream testgrpc.TestService_StreamingInputCallServer) error {
	var size int32
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: size})
		}
		if err != nil {
			return err
		}
		size += int32(len(m.GetPayload().GetBody()))
	}
}

func (s *service) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: m.GetPayload()}); err != nil {
			return err
		}
	}
}

// serve starts a gRPC server of svc with opts on a loopback port, stopped
// when t ends, and returns a client of it.
func serve(t testing.TB, svc testgrpc.TestServiceServer, opts ...grpc.ServerOption) testgrpc.TestServiceClient {
	t.Helper()
	return dial(t, serveAddr(t, svc, opts...))
}

// serveAddr starts a gRPC server of svc as serve does, and returns its
// address.
func serveAddr(t testing.TB, svc testgrpc.TestServiceServer, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// dial returns a client of the TestService at addr, closed when t ends.
func dial(t testing.TB, addr string, opts ...grpc.DialOption) testgrpc.TestServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return testgrpc.NewTestServiceClient(conn)
}

// answer is what a unary call came back with.
type answer struct {
	resp            *testgrpc.SimpleResponse
	err             error
	header, trailer metadata.MD
}

// unary calls UnaryCall with the metadata pairs kv.
func unary(t testing.TB, c testgrpc.TestServiceClient, kv ...string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var a answer
	ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	a.resp, a.err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Header(&a.header), grpc.Trailer(&a.trailer))
	return a
}

// first is the first value of key in md, or "".
func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// incoming is the first value of key in the incoming metadata of ctx.
func incoming(ctx context.Context, key string) string {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}
