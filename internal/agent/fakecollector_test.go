package agent

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"

	"github.com/spanprof/spanprof/internal/export/otlp/conform"
	"github.com/spanprof/spanprof/internal/profile"
)

// fakeCollector is an in-process OTLP profiles gRPC server built on the
// collector's own server side (pprofileotlp.RegisterGRPCServer).
type fakeCollector struct {
	pprofileotlp.UnimplementedGRPCServer
	addr string
	srv  *grpc.Server

	mu    sync.Mutex
	calls int
	got   []pprofile.Profiles
	md    []metadata.MD
	// raw holds every request body as it came over the wire.
	raw [][]byte
	// compression is what the last request's header named.
	compression string
	// fail decides the outcome of call n (1-based); nil accepts all.
	fail func(n int) error
}

// startFakeCollector serves on addr ("127.0.0.1:0" for any port).
func startFakeCollector(t *testing.T, addr string, fail func(n int) error) *fakeCollector {
	t.Helper()
	var ln net.Listener
	var err error
	// A port just released by a stopped server may linger briefly.
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	f := &fakeCollector{addr: ln.Addr().String(), fail: fail}
	f.srv = grpc.NewServer(grpc.StatsHandler(headerSpy{f}),
		grpc.ForceServerCodecV2(bodySpy{f: f, CodecV2: encoding.GetCodecV2("proto")}))
	pprofileotlp.RegisterGRPCServer(f.srv, f)
	go func() { _ = f.srv.Serve(ln) }()
	t.Cleanup(f.srv.Stop)
	// Every export request of every test must pass the conformance
	// rules, as profcheck counts them.
	t.Cleanup(func() { f.checkConform(t) })
	return f
}

// bodySpy keeps each request body before the collector's codec decodes it.
type bodySpy struct {
	encoding.CodecV2
	f *fakeCollector
}

func (b bodySpy) Unmarshal(data mem.BufferSlice, v any) error {
	b.f.mu.Lock()
	b.f.raw = append(b.f.raw, data.Materialize())
	b.f.mu.Unlock()
	return b.CodecV2.Unmarshal(data, v)
}

// checkConform runs the conformance rules over every request body.
func (f *fakeCollector) checkConform(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, body := range f.raw {
		if err := (conform.Checker{Profcheck: true}).CheckProto(body); err != nil {
			t.Errorf("export request %d of %d: %v", i+1, len(f.raw), err)
		}
	}
}

func (f *fakeCollector) Export(ctx context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail != nil {
		if err := f.fail(f.calls); err != nil {
			return pprofileotlp.NewExportResponse(), err
		}
	}
	cp := pprofile.NewProfiles()
	req.Profiles().CopyTo(cp)
	f.got = append(f.got, cp)
	md, _ := metadata.FromIncomingContext(ctx)
	f.md = append(f.md, md)
	return pprofileotlp.NewExportResponse(), nil
}

// headerSpy records the compression of incoming requests, which gRPC
// strips from the metadata handlers see.
type headerSpy struct{ f *fakeCollector }

func (h headerSpy) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h headerSpy) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (h headerSpy) HandleConn(context.Context, stats.ConnStats) {}
func (h headerSpy) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InHeader); ok {
		h.f.mu.Lock()
		h.f.compression = in.Compression
		h.f.mu.Unlock()
	}
}

func (f *fakeCollector) received() []pprofile.Profiles {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]pprofile.Profiles(nil), f.got...)
}

// waitReceived waits until n batches arrived.
func (f *fakeCollector) waitReceived(t *testing.T, n int, timeout time.Duration) []pprofile.Profiles {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := f.received()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector received %d batches, want %d within %v", len(got), n, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sampleCount counts events (timestamps) in pd.
func sampleCount(pd pprofile.Profiles) int {
	n := 0
	rps := pd.ResourceProfiles()
	for i := 0; i < rps.Len(); i++ {
		sps := rps.At(i).ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			ps := sps.At(j).Profiles()
			for k := 0; k < ps.Len(); k++ {
				ss := ps.At(k).Samples()
				for l := 0; l < ss.Len(); l++ {
					n += ss.At(l).TimestampsUnixNano().Len()
				}
			}
		}
	}
	return n
}

// batchPID reads process.pid of the first resource: tests give each batch
// its own pid to tell batches apart.
func batchPID(pd pprofile.Profiles) int64 {
	if pd.ResourceProfiles().Len() == 0 {
		return -1
	}
	v, _ := pd.ResourceProfiles().At(0).Resource().Attributes().Get("process.pid")
	return v.Int()
}

// testProfile is a batch of n on-CPU samples of pid.
func testProfile(pid uint32, n int) *profile.Profile {
	m := &profile.Mapping{Start: 0x1000, Limit: 0x2000, Path: "/bin/test", BuildID: "abcd"}
	p := &profile.Profile{
		Start:     time.Unix(100, 0),
		End:       time.Unix(110, 0),
		Frequency: 19,
		Processes: map[uint32]*profile.Process{pid: {PID: pid, ExeName: "test", ExePath: "/bin/test"}},
	}
	for i := 0; i < n; i++ {
		p.Samples = append(p.Samples, profile.Sample{
			PID: pid, TID: pid, ThreadName: "test",
			Frames: []profile.Frame{{Address: 0x1100, Function: "work", Mapping: m}},
			Time:   time.Unix(100, int64(i)*1e6), Value: 1,
		})
	}
	return p
}

func testBatch(t *testing.T, pid uint32, n int) Batch {
	t.Helper()
	b, err := NewBatch(testProfile(pid, n))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// freeAddr returns a loopback address nobody listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func fastExport() Export {
	e := Default().Export
	e.TLS.Insecure = true
	e.Timeout = 2 * time.Second
	e.Retry = Retry{InitialInterval: 10 * time.Millisecond, MaxInterval: 100 * time.Millisecond, MaxElapsed: time.Minute}
	return e
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func fmtPIDs(got []pprofile.Profiles) string {
	var s []int64
	for _, pd := range got {
		s = append(s, batchPID(pd))
	}
	return fmt.Sprint(s)
}
