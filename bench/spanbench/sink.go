package main

import (
	"context"
	"net"
	"sync/atomic"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the agent may compress
)

// sink is an OTLP profiles endpoint that keeps nothing, so the agent's
// export path runs in full (encode, gRPC) without a collector's cost on
// the machine. It counts the samples of one thread name (watch), and of
// those the ones with every frame named.
type sink struct {
	pprofileotlp.UnimplementedGRPCServer
	srv      *grpc.Server
	addr     string
	requests atomic.Int64

	watch          atomic.Pointer[string]
	watched, named atomic.Int64
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

func (s *sink) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	s.requests.Add(1)
	if w := s.watch.Load(); w != nil {
		all, named := countNamed(req.Profiles(), *w)
		s.watched.Add(all)
		s.named.Add(named)
	}
	return pprofileotlp.NewExportResponse(), nil
}

// countNamed returns the samples (by value) of thread name in pd, and those
// of them with every frame named.
func countNamed(pd pprofile.Profiles, name string) (all, named int64) {
	d := pd.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	for _, rp := range pd.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, prof := range sp.Profiles().All() {
			samples:
				for _, smp := range prof.Samples().All() {
					var v int64
					for _, x := range smp.Values().All() {
						v += x
					}
					thread := ""
					for _, ai := range smp.AttributeIndices().All() {
						if kv := d.AttributeTable().At(int(ai)); str(kv.KeyStrindex()) == "thread.name" {
							thread = kv.Value().AsString()
						}
					}
					if thread != name {
						continue
					}
					all += v
					for _, li := range d.StackTable().At(int(smp.StackIndex())).LocationIndices().All() {
						loc := d.LocationTable().At(int(li))
						ok := false
						for _, ln := range loc.Lines().All() {
							ok = ok || str(d.FunctionTable().At(int(ln.FunctionIndex())).NameStrindex()) != ""
						}
						if !ok {
							continue samples
						}
					}
					named += v
				}
			}
		}
	}
	return all, named
}

func (s *sink) stop() { s.srv.Stop() }
