// Command sink is the OTLP/gRPC profiles endpoint of the kernel-matrix
// test: it runs beside the agent (in the guest, or on the host), and
// writes every export request it receives as an OTLP/JSON file, so the
// test judges what the agent really sent.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the agent may compress
)

type sink struct {
	pprofileotlp.UnimplementedGRPCServer
	dir string
	n   atomic.Int64
}

func (s *sink) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	var m pprofile.JSONMarshaler
	b, err := m.MarshalProfiles(req.Profiles())
	if err != nil {
		return pprofileotlp.NewExportResponse(), fmt.Errorf("marshal profiles: %w", err)
	}
	path := filepath.Join(s.dir, fmt.Sprintf("export-%03d.otlp.json", s.n.Add(1)))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return pprofileotlp.NewExportResponse(), fmt.Errorf("write %s: %w", path, err)
	}
	return pprofileotlp.NewExportResponse(), nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:4317", "address to receive OTLP/gRPC on")
	dir := flag.String("dir", ".", "directory to write the received requests to")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("sink: listen: %v", err)
	}
	srv := grpc.NewServer()
	s := &sink{dir: *dir}
	pprofileotlp.RegisterGRPCServer(srv, s)
	go func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		<-c
		srv.GracefulStop()
	}()
	fmt.Println("sink listening on", ln.Addr())
	if err := srv.Serve(ln); err != nil {
		log.Fatalf("sink: serve: %v", err)
	}
	fmt.Println("sink received", s.n.Load(), "requests")
}
