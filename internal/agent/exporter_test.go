package agent

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	case d.Histogram != nil:
		return float64(d.Histogram.GetSampleCount())
	}
	t.Fatalf("metric %v has no value", m.Desc())
	return 0
}

func newTestExporter(t *testing.T, endpoint string, cfg Export) (*Exporter, *Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	e, err := NewExporter(endpoint, cfg, m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = e.Shutdown(ctx)
	})
	return e, m
}

func TestExporterDelivers(t *testing.T) {
	col := startFakeCollector(t, "127.0.0.1:0", nil)
	cfg := fastExport()
	cfg.Headers = map[string]string{"Authorization": "Bearer s3cret", "x-tenant": "a=b"}
	e, m := newTestExporter(t, col.addr, cfg)
	e.Enqueue(testBatch(t, 7, 5))
	got := col.waitReceived(t, 1, 5*time.Second)
	if n := sampleCount(got[0]); n != 5 {
		t.Errorf("collector got %d samples, want 5", n)
	}
	if pid := batchPID(got[0]); pid != 7 {
		t.Errorf("process.pid = %d, want 7", pid)
	}
	md := col.md[0]
	if v := md.Get("authorization"); len(v) != 1 || v[0] != "Bearer s3cret" {
		t.Errorf("authorization header = %q", v)
	}
	if v := md.Get("x-tenant"); len(v) != 1 || v[0] != "a=b" {
		t.Errorf("x-tenant header = %q", v)
	}
	if col.compression != "gzip" {
		t.Errorf("request compression %q, want gzip", col.compression)
	}
	waitFor(t, "success counted", time.Second, func() bool {
		return value(t, m.exportedSamples.WithLabelValues(col.addr)) == 5
	})
	if v := value(t, m.exportRequests.WithLabelValues(col.addr, "success")); v != 1 {
		t.Errorf("successful requests = %v, want 1", v)
	}
	if v := value(t, m.exportDuration.WithLabelValues(col.addr).(prometheus.Metric)); v != 1 {
		t.Errorf("latency observations = %v, want 1", v)
	}
}

func TestExporterNoCompression(t *testing.T) {
	col := startFakeCollector(t, "127.0.0.1:0", nil)
	cfg := fastExport()
	cfg.Compression = "none"
	e, _ := newTestExporter(t, col.addr, cfg)
	e.Enqueue(testBatch(t, 7, 1))
	col.waitReceived(t, 1, 5*time.Second)
	if col.compression != "" {
		t.Errorf("request compression %q, want none", col.compression)
	}
}

func TestExporterRetries(t *testing.T) {
	tests := []struct {
		name        string
		fail        func(n int) error
		wantBatches int
		wantDrop    string
	}{
		{"unavailable twice", func(n int) error {
			if n <= 2 {
				return status.Error(codes.Unavailable, "down")
			}
			return nil
		}, 1, ""},
		{"resource exhausted with retry info", func(n int) error {
			if n == 1 {
				st, _ := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(20 * time.Millisecond)})
				return st.Err()
			}
			return nil
		}, 1, ""},
		{"invalid argument is not retried", func(int) error {
			return status.Error(codes.InvalidArgument, "bad")
		}, 0, DropRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			col := startFakeCollector(t, "127.0.0.1:0", tt.fail)
			e, m := newTestExporter(t, col.addr, fastExport())
			e.Enqueue(testBatch(t, 1, 3))
			if tt.wantDrop != "" {
				waitFor(t, "drop counted", 5*time.Second, func() bool {
					return value(t, m.droppedSamples.WithLabelValues(col.addr, tt.wantDrop)) == 3
				})
				if col.calls != 1 {
					t.Errorf("collector saw %d calls, want 1 (no retry)", col.calls)
				}
				return
			}
			col.waitReceived(t, tt.wantBatches, 5*time.Second)
		})
	}
}

func TestExporterGivesUpAfterMaxElapsed(t *testing.T) {
	col := startFakeCollector(t, "127.0.0.1:0", func(int) error { return status.Error(codes.Unavailable, "down") })
	cfg := fastExport()
	cfg.Retry.MaxElapsed = 150 * time.Millisecond
	e, m := newTestExporter(t, col.addr, cfg)
	e.Enqueue(testBatch(t, 1, 4))
	waitFor(t, "retries exhausted", 5*time.Second, func() bool {
		return value(t, m.droppedBatches.WithLabelValues(col.addr, DropRetriesExhausted)) == 1
	})
	if v := value(t, m.droppedSamples.WithLabelValues(col.addr, DropRetriesExhausted)); v != 4 {
		t.Errorf("dropped samples = %v, want 4", v)
	}
	if col.calls < 2 {
		t.Errorf("collector saw %d calls, want retries", col.calls)
	}
}

// TestExporterCollectorDownThenUp: while the collector is down, batches
// wait up to the queue bound plus the one in flight; beyond it the oldest
// waiting are dropped and counted. Once it is up, the rest arrive in order.
func TestExporterCollectorDownThenUp(t *testing.T) {
	addr := freeAddr(t)
	cfg := fastExport()
	cfg.QueueSize = 3
	e, m := newTestExporter(t, addr, cfg)
	failures := func() float64 { return value(t, m.exportRequests.WithLabelValues(addr, codes.Unavailable.String())) }

	e.Enqueue(testBatch(t, 1, 10)) // taken at once and retried: in flight
	waitFor(t, "first failure", 5*time.Second, func() bool { return failures() >= 1 })
	for pid := uint32(2); pid <= 6; pid++ {
		e.Enqueue(testBatch(t, pid, 10))
	}
	// In flight 1; queued 4, 5, 6; 2 and 3 dropped as the oldest.
	if n := e.QueueLen(); n != 3 {
		t.Fatalf("queue length %d, want 3", n)
	}
	if v := value(t, m.queueLength.WithLabelValues(addr)); v != 3 {
		t.Errorf("queue length gauge = %v, want 3", v)
	}
	if v := value(t, m.droppedBatches.WithLabelValues(addr, DropQueueFull)); v != 2 {
		t.Errorf("dropped batches = %v, want 2", v)
	}
	if v := value(t, m.droppedSamples.WithLabelValues(addr, DropQueueFull)); v != 20 {
		t.Errorf("dropped samples = %v, want 20", v)
	}
	time.Sleep(200 * time.Millisecond) // down for a while: several retries

	col := startFakeCollector(t, addr, nil)
	got := col.waitReceived(t, 4, 10*time.Second)
	if s := fmtPIDs(got); s != "[1 4 5 6]" {
		t.Errorf("batches arrived for pids %s, want [1 4 5 6]", s)
	}
	total := 0
	for _, pd := range got {
		total += sampleCount(pd)
	}
	if total != 40 {
		t.Errorf("collector got %d samples, want 40", total)
	}
	if failures() < 2 {
		t.Errorf("failed attempts = %v, want retries while down", failures())
	}
	waitFor(t, "queue empty", time.Second, func() bool { return value(t, m.queueLength.WithLabelValues(addr)) == 0 })
}

// TestExporterQueueBytes: the queue is bounded by the encoded size of
// its batches as well as by their count. Past the byte bound the oldest
// waiting batches are dropped and counted as queue-full drops; a batch
// over the bound on its own still waits.
func TestExporterQueueBytes(t *testing.T) {
	addr := freeAddr(t)
	e, m := newTestExporter(t, addr, fastExport()) // 60 batches may wait
	failures := func() float64 { return value(t, m.exportRequests.WithLabelValues(addr, codes.Unavailable.String())) }

	e.Enqueue(testBatch(t, 1, 10)) // in flight, failing
	waitFor(t, "first failure", 5*time.Second, func() bool { return failures() >= 1 })
	batches := map[uint32]Batch{}
	for pid := uint32(2); pid <= 7; pid++ {
		batches[pid] = testBatch(t, pid, 10)
	}
	// Room for two batches of these.
	e.mu.Lock()
	e.maxQueueBytes = batches[5].Size() + batches[6].Size()
	e.mu.Unlock()
	for pid := uint32(2); pid <= 6; pid++ {
		e.Enqueue(batches[pid])
	}
	// In flight 1; queued 5, 6; 2, 3 and 4 dropped as the oldest.
	wantBytes := batches[5].Size() + batches[6].Size()
	if n, b := e.QueueLen(), e.QueueBytes(); n != 2 || b != wantBytes {
		t.Fatalf("queue holds %d batches, %d bytes; want 2, %d", n, b, wantBytes)
	}
	if v := value(t, m.queueBytes.WithLabelValues(addr)); v != float64(wantBytes) {
		t.Errorf("queue bytes gauge = %v, want %d", v, wantBytes)
	}
	if v := value(t, m.droppedBatches.WithLabelValues(addr, DropQueueFull)); v != 3 {
		t.Errorf("dropped batches = %v, want 3", v)
	}
	if v := value(t, m.droppedSamples.WithLabelValues(addr, DropQueueFull)); v != 30 {
		t.Errorf("dropped samples = %v, want 30", v)
	}
	// A bound below one batch: the newest waits alone.
	e.mu.Lock()
	e.maxQueueBytes = 1
	e.mu.Unlock()
	e.Enqueue(batches[7])
	if n, b := e.QueueLen(), e.QueueBytes(); n != 1 || b != batches[7].Size() {
		t.Errorf("queue holds %d batches, %d bytes; want the newest alone, %d bytes", n, b, batches[7].Size())
	}
	if v := value(t, m.droppedBatches.WithLabelValues(addr, DropQueueFull)); v != 5 {
		t.Errorf("dropped batches = %v, want 5", v)
	}

	col := startFakeCollector(t, addr, nil)
	if s := fmtPIDs(col.waitReceived(t, 2, 10*time.Second)); s != "[1 7]" {
		t.Errorf("batches arrived for pids %s, want [1 7]", s)
	}
	waitFor(t, "queue empty", time.Second, func() bool { return value(t, m.queueBytes.WithLabelValues(addr)) == 0 })
}

func TestExporterShutdown(t *testing.T) {
	t.Run("flushes the queue", func(t *testing.T) {
		col := startFakeCollector(t, "127.0.0.1:0", nil)
		e, _ := newTestExporter(t, col.addr, fastExport())
		for pid := uint32(1); pid <= 5; pid++ {
			e.Enqueue(testBatch(t, pid, 2))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if got := col.received(); len(got) != 5 {
			t.Errorf("collector got %d batches after shutdown, want 5", len(got))
		}
	})
	t.Run("counts what the deadline cut off", func(t *testing.T) {
		addr := freeAddr(t)
		e, m := newTestExporter(t, addr, fastExport())
		for pid := uint32(1); pid <= 3; pid++ {
			e.Enqueue(testBatch(t, pid, 2))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err := e.Shutdown(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown = %v, want deadline exceeded", err)
		}
		if v := value(t, m.droppedSamples.WithLabelValues(addr, DropShutdown)); v != 6 {
			t.Errorf("samples dropped at shutdown = %v, want 6", v)
		}
		e.Enqueue(testBatch(t, 9, 1))
		if v := value(t, m.droppedSamples.WithLabelValues(addr, DropShutdown)); v != 7 {
			t.Errorf("enqueue after shutdown: dropped samples = %v, want 7", v)
		}
	})
}

func TestRetryable(t *testing.T) {
	withInfo, _ := status.New(codes.ResourceExhausted, "x").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(3 * time.Second)})
	tests := []struct {
		err       error
		wantRetry bool
		wantDelay time.Duration
	}{
		{status.Error(codes.Unavailable, ""), true, 0},
		{status.Error(codes.DeadlineExceeded, ""), true, 0},
		{status.Error(codes.Aborted, ""), true, 0},
		{status.Error(codes.ResourceExhausted, ""), true, 0},
		{withInfo.Err(), true, 3 * time.Second},
		{status.Error(codes.InvalidArgument, ""), false, 0},
		{status.Error(codes.Unauthenticated, ""), false, 0},
		{status.Error(codes.Unimplemented, ""), false, 0},
		{context.Canceled, false, 0},
	}
	for _, tt := range tests {
		t.Run(status.Code(tt.err).String(), func(t *testing.T) {
			d, ok := retryable(tt.err)
			if ok != tt.wantRetry || d != tt.wantDelay {
				t.Errorf("retryable(%v) = %v, %v; want %v, %v", tt.err, d, ok, tt.wantDelay, tt.wantRetry)
			}
		})
	}
}

func TestJitter(t *testing.T) {
	var ds []time.Duration
	for i := 0; i < 100; i++ {
		d := jitter(time.Second)
		if d < 800*time.Millisecond || d > 1200*time.Millisecond {
			t.Fatalf("jitter(1s) = %v, outside ±20%%", d)
		}
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	if ds[0] == ds[len(ds)-1] {
		t.Error("jitter returned one value 100 times")
	}
}
