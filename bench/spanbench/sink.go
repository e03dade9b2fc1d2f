package main

import (
	"context"
	"net"
	"sync/atomic"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the agent may compress
)

// sink is a do-nothing OTLP profiles endpoint, so the agent's export path
// runs in full (encode, gRPC) without a collector's cost on the machine.
type sink struct {
	pprofileotlp.UnimplementedGRPCServer
	srv      *grpc.Server
	addr     string
	requests atomic.Int64
}

func startSink() (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{srv: grpc.NewServer(), addr: ln.Addr().String()}
	pprofileotlp.RegisterGRPCServer(s.srv, s)
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *sink) Export(context.Context, pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	s.requests.Add(1)
	return pprofileotlp.NewExportResponse(), nil
}

func (s *sink) stop() { s.srv.Stop() }
