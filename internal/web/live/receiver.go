package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // collectors and agents may compress
	"google.golang.org/grpc/status"

	"github.com/spanprof/spanprof/internal/export/otlp"
)

// ErrNotLoopback is returned for an OTLP listen address beyond loopback
// when remote senders were not allowed.
var ErrNotLoopback = errors.New("not a loopback address")

// CheckLoopback refuses addr unless its host is loopback (or "localhost").
// The receiver has no authentication: anyone who reaches it can write into
// the window the UI shows.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("parse otlp listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("otlp listen on %s: %w; the receiver has no authentication, pass --otlp-allow-remote to accept data from other hosts", addr, ErrNotLoopback)
}

// Receiver is the OTLP/gRPC endpoint: the profiles service (development
// version, as agents and collectors send it) and the trace service.
type Receiver struct {
	store Backend
	log   *slog.Logger
	srv   *grpc.Server
}

// NewReceiver returns a receiver writing into store.
func NewReceiver(store Backend, log *slog.Logger) *Receiver {
	r := &Receiver{store: store, log: log}
	// Profiles of a busy host exceed gRPC's 4 MiB default; the agent
	// caps its own requests, a collector may batch more.
	r.srv = grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
	pprofileotlp.RegisterGRPCServer(r.srv, &profilesServer{r: r})
	ptraceotlp.RegisterGRPCServer(r.srv, &tracesServer{r: r})
	return r
}

// Serve accepts on ln until ctx ends, applying the age limit every second
// so an idle window ages out too, and logging once a minute what the
// window evicted in it.
func (r *Receiver) Serve(ctx context.Context, ln net.Listener) error {
	done := make(chan error, 1)
	go func() { done <- r.srv.Serve(ln) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var logged Stats
	for n := 1; ; n++ {
		select {
		case err := <-done:
			return fmt.Errorf("serve otlp: %w", err)
		case <-tick.C:
			r.store.Evict()
			if n%60 == 0 {
				logged = r.logEvictions(logged)
			}
		case <-ctx.Done():
			stopped := make(chan struct{})
			go func() { r.srv.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(5 * time.Second):
				r.srv.Stop()
			}
			return nil
		}
	}
}

// logEvictions logs what left the window since prev, if anything, and
// returns the current counters.
func (r *Receiver) logEvictions(prev Stats) Stats {
	st := r.store.Stats()
	samples := st.EvictedSamplesSize + st.EvictedSamplesBytes + st.EvictedSamplesAge -
		(prev.EvictedSamplesSize + prev.EvictedSamplesBytes + prev.EvictedSamplesAge)
	spans := st.EvictedSpansSize + st.EvictedSpansAge - (prev.EvictedSpansSize + prev.EvictedSpansAge)
	if samples > 0 || spans > 0 {
		r.log.Info("live window evicted its oldest data", "samples", samples, "spans", spans,
			"by_count", st.EvictedSamplesSize-prev.EvictedSamplesSize, "by_bytes", st.EvictedSamplesBytes-prev.EvictedSamplesBytes,
			"by_age", st.EvictedSamplesAge-prev.EvictedSamplesAge, "window_samples", st.Samples, "window_mib", st.Bytes>>20)
	}
	return st
}

type profilesServer struct {
	pprofileotlp.UnimplementedGRPCServer
	r *Receiver
}

// admit asks the store, when it can fall behind, whether it takes an
// export now.
func (r *Receiver) admit() error {
	if a, ok := r.store.(Admitter); ok {
		if err := a.Admit(); err != nil {
			return status.Error(codes.Unavailable, err.Error())
		}
	}
	return nil
}

func (s *profilesServer) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	if err := s.r.admit(); err != nil {
		return pprofileotlp.NewExportResponse(), err
	}
	p, err := otlp.FromProfiles(req.Profiles())
	if errors.Is(err, otlp.ErrNoProfiles) {
		return pprofileotlp.NewExportResponse(), nil
	}
	if err != nil {
		s.r.store.Reject()
		s.r.log.Warn("reject otlp profiles", "err", err)
		return pprofileotlp.NewExportResponse(), status.Error(codes.InvalidArgument, err.Error())
	}
	s.r.store.AddProfile(p)
	s.r.log.Debug("received profiles", "samples", len(p.Samples), "processes", len(p.Processes))
	return pprofileotlp.NewExportResponse(), nil
}

type tracesServer struct {
	ptraceotlp.UnimplementedGRPCServer
	r *Receiver
}

func (s *tracesServer) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	if err := s.r.admit(); err != nil {
		return ptraceotlp.NewExportResponse(), err
	}
	spans := SpansFromTraces(req.Traces())
	s.r.store.AddSpans(spans)
	s.r.log.Debug("received spans", "spans", len(spans))
	return ptraceotlp.NewExportResponse(), nil
}

// SpansFromTraces flattens an OTLP trace export into spans, taking the
// service from each resource's service.name.
func SpansFromTraces(td ptrace.Traces) []Span {
	var out []Span
	for _, rs := range td.ResourceSpans().All() {
		service := ""
		if v, ok := rs.Resource().Attributes().Get("service.name"); ok {
			service = v.AsString()
		}
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				out = append(out, Span{
					TraceID:      [16]byte(sp.TraceID()),
					SpanID:       [8]byte(sp.SpanID()),
					ParentSpanID: [8]byte(sp.ParentSpanID()),
					Name:         sp.Name(),
					Service:      service,
					Kind:         sp.Kind().String(),
					Start:        sp.StartTimestamp().AsTime(),
					End:          sp.EndTimestamp().AsTime(),
					Status:       sp.Status().Code().String(),
				})
			}
		}
	}
	return out
}
