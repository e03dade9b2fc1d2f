package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/spanprof/spanprof/internal/export/otlp"
	"github.com/spanprof/spanprof/internal/profile"
)

// Batch is one report ready to send: the OTLP request in protobuf form,
// which is compact (the dictionary shares every string, frame and stack)
// and immutable, so exporters share it and send these very bytes on
// every attempt.
type Batch struct {
	data []byte
	// Samples is the number of events in it, for the counts of what was
	// sent and dropped.
	Samples int
}

// NewBatch encodes p.
func NewBatch(p *profile.Profile) (Batch, error) {
	return newBatch(p, profile.NewAggregate(p), len(p.Samples))
}

// newBatch encodes agg, the aggregate of n samples, with p's processes and
// times (p's own samples are not read).
func newBatch(p *profile.Profile, agg *profile.Aggregate, n int) (Batch, error) {
	// EncodeProto, not pdata's marshaller: its output passes the
	// conformance rules (see otlp.EncodeProto).
	data, err := otlp.EncodeProto(otlp.BuildAggregate(p, agg))
	if err != nil {
		return Batch{}, fmt.Errorf("encode profiles: %w", err)
	}
	return Batch{data: data, Samples: n}, nil
}

// Size is the encoded size in bytes.
func (b Batch) Size() int { return len(b.data) }

// Exporter sends profiles to one collector. Enqueue never blocks: batches
// wait in a queue bounded by count and by bytes while one is in flight,
// and a full queue drops its oldest batches (a profiler's recent past is
// worth more than a stale one), counting them. Retryable failures back
// off exponentially.
type Exporter struct {
	endpoint string
	conn     *grpc.ClientConn
	md       metadata.MD
	cfg      Export
	m        *Metrics
	log      *slog.Logger

	// ctx ends sending: at the shutdown deadline, or at once on Close.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{}
	// flushing is closed when Shutdown begins, to cut a backoff short.
	flushing chan struct{}

	sentSamples, droppedSamples atomic.Uint64

	mu       sync.Mutex
	queue    []Batch
	draining bool
	// queueBytes is the encoded size of the queued batches, bounded by
	// maxQueueBytes (but the newest batch always waits).
	queueBytes, maxQueueBytes int
	// Queue-full drops are logged at most once a minute, with a count.
	dropLogged time.Time
	dropsQuiet int

	// An outage (failures until the next success) is logged when it
	// starts, then every outageLogEvery while it lasts, and when it ends:
	// neither one line then silence, nor a line per attempt. Only the
	// sending goroutine touches these.
	outageLogEvery time.Duration
	outageSince    time.Time
	outageLogged   time.Time
	outageFails    int
}

// defaultOutageLogEvery bounds the outage log to a line a minute.
const defaultOutageLogEvery = time.Minute

// NewExporter dials endpoint lazily (gRPC connects on the first request)
// and starts the sending goroutine.
func NewExporter(endpoint string, cfg Export, m *Metrics, log *slog.Logger) (*Exporter, error) {
	creds, err := transportCredentials(cfg.TLS)
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// gRPC's own reconnect backoff grows to two minutes by default;
		// keep it within the export retry's so a collector that comes
		// back is seen by the next retry.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  cfg.Retry.InitialInterval,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   cfg.Retry.MaxInterval,
			},
			MinConnectTimeout: cfg.Timeout,
		}),
	}
	if cfg.Compression == "gzip" {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.UseCompressor(gzip.Name)))
	}
	conn, err := grpc.NewClient(endpoint, opts...)
	if err != nil {
		return nil, fmt.Errorf("create gRPC client for %s: %w", endpoint, err)
	}
	md := metadata.MD{}
	for k, v := range cfg.Headers {
		md.Set(strings.ToLower(k), v)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Exporter{
		endpoint: endpoint,
		conn:     conn,
		md:       md,
		cfg:      cfg,
		m:        m,
		log:      log.With("endpoint", endpoint),
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan struct{}),
		wake:     make(chan struct{}, 1),
		flushing: make(chan struct{}),

		maxQueueBytes:  cfg.QueueMiB << 20,
		outageLogEvery: defaultOutageLogEvery,
	}
	m.initEndpoint(endpoint)
	go e.loop()
	return e, nil
}

func transportCredentials(c TLS) (credentials.TransportCredentials, error) {
	if c.Insecure {
		return insecure.NewCredentials(), nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("read CA file %s: no PEM certificate in it", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(tc), nil
}

// ExporterStats counts samples (events) by fate.
type ExporterStats struct {
	SentSamples, DroppedSamples uint64
}

// Stats returns what was sent and dropped so far.
func (e *Exporter) Stats() ExporterStats {
	return ExporterStats{SentSamples: e.sentSamples.Load(), DroppedSamples: e.droppedSamples.Load()}
}

func (e *Exporter) drop(reason string, samples int) {
	e.droppedSamples.Add(uint64(samples))
	e.m.drop(e.endpoint, reason, samples)
}

// Endpoint returns the collector address.
func (e *Exporter) Endpoint() string { return e.endpoint }

// Enqueue queues p for sending. After Shutdown began it drops p.
func (e *Exporter) Enqueue(b Batch) {
	e.mu.Lock()
	if e.draining {
		e.mu.Unlock()
		e.drop(DropShutdown, b.Samples)
		return
	}
	e.queue = append(e.queue, b)
	e.queueBytes += b.Size()
	var dropped []int // samples of each batch dropped
	for len(e.queue) > 1 && (len(e.queue) > e.cfg.QueueSize || e.queueBytes > e.maxQueueBytes) {
		dropped = append(dropped, e.pop().Samples)
	}
	e.m.setQueue(e.endpoint, len(e.queue), e.queueBytes)
	logDrops := 0
	if len(dropped) > 0 {
		e.dropsQuiet += len(dropped)
		if time.Since(e.dropLogged) >= time.Minute {
			logDrops, e.dropsQuiet, e.dropLogged = e.dropsQuiet, 0, time.Now()
		}
	}
	e.mu.Unlock()
	for _, n := range dropped {
		e.drop(DropQueueFull, n)
	}
	if logDrops > 0 {
		e.log.Warn("export queue full, dropping the oldest batches", "dropped_batches", logDrops,
			"queue_size", e.cfg.QueueSize, "queue_mib", e.cfg.QueueMiB)
	}
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// pop takes the oldest batch off the queue, which is not empty. Callers
// hold e.mu.
func (e *Exporter) pop() Batch {
	b := e.queue[0]
	e.queue[0] = Batch{}
	e.queue = e.queue[1:]
	e.queueBytes -= b.Size()
	return b
}

// QueueLen returns how many batches wait, not counting the one in flight.
func (e *Exporter) QueueLen() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.queue)
}

// QueueBytes returns the encoded size of the batches that wait.
func (e *Exporter) QueueBytes() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.queueBytes
}

// Shutdown sends what is queued until ctx ends, then drops the rest
// (counted) and closes the connection.
func (e *Exporter) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	if !e.draining {
		e.draining = true
		close(e.flushing)
	}
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	var err error
	select {
	case <-e.done:
	case <-ctx.Done():
		e.cancel()
		<-e.done
		err = fmt.Errorf("flush to %s: %w", e.endpoint, ctx.Err())
	}
	e.cancel()
	e.mu.Lock()
	rest := e.queue
	e.queue, e.queueBytes = nil, 0
	e.m.setQueue(e.endpoint, 0, 0)
	e.mu.Unlock()
	for _, b := range rest {
		e.drop(DropShutdown, b.Samples)
	}
	if len(rest) > 0 {
		e.log.Warn("dropped unsent batches at shutdown", "batches", len(rest))
	}
	if cerr := e.conn.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close connection to %s: %w", e.endpoint, cerr)
	}
	return err
}

func (e *Exporter) loop() {
	defer close(e.done)
	for {
		b, ok := e.next()
		if !ok {
			return
		}
		e.deliver(b)
	}
}

// next takes the oldest batch, waiting for one; false once draining has
// emptied the queue or sending was cancelled.
func (e *Exporter) next() (Batch, bool) {
	for {
		if e.ctx.Err() != nil {
			return Batch{}, false
		}
		e.mu.Lock()
		if len(e.queue) > 0 {
			b := e.pop()
			e.m.setQueue(e.endpoint, len(e.queue), e.queueBytes)
			e.mu.Unlock()
			return b, true
		}
		draining := e.draining
		e.mu.Unlock()
		if draining {
			return Batch{}, false
		}
		select {
		case <-e.wake:
		case <-e.ctx.Done():
		}
	}
}

// deliver sends p, retrying retryable failures with exponential backoff
// until it is accepted, refused, out of time, or sending is cancelled.
func (e *Exporter) deliver(b Batch) {
	n := b.Samples
	start := time.Now()
	wait := e.cfg.Retry.InitialInterval
	flushing := e.flushing
	for attempt := 1; ; attempt++ {
		err := e.send(b)
		if err == nil {
			e.m.exportedBatches.WithLabelValues(e.endpoint).Inc()
			e.m.exportedSamples.WithLabelValues(e.endpoint).Add(float64(n))
			e.sentSamples.Add(uint64(n))
			if !e.outageSince.IsZero() {
				e.log.Info("export succeeded after an outage", "outage", time.Since(e.outageSince).Round(time.Second), "attempts", attempt, "samples", n)
				e.outageSince = time.Time{}
			}
			return
		}
		if e.ctx.Err() != nil {
			e.drop(DropShutdown, n)
			e.log.Warn("export cancelled at shutdown", "samples", n, "error", err)
			return
		}
		delay, retry := retryable(err)
		if !retry {
			e.drop(DropRejected, n)
			e.log.Error("collector refused batch", "samples", n, "error", err)
			return
		}
		if delay == 0 {
			delay = jitter(wait)
			wait = min(2*wait, e.cfg.Retry.MaxInterval)
		}
		if limit := e.cfg.Retry.MaxElapsed; limit > 0 && time.Since(start)+delay > limit {
			e.drop(DropRetriesExhausted, n)
			e.log.Error("export failed, giving up on batch", "attempts", attempt, "samples", n, "error", err)
			return
		}
		e.logFailure(attempt, delay, err)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-flushing:
			// Shutting down: try again at once, then back off afresh
			// within what is left of the deadline.
			t.Stop()
			flushing = nil
			wait = e.cfg.Retry.InitialInterval
		case <-e.ctx.Done():
			t.Stop()
			e.drop(DropShutdown, n)
			return
		}
	}
}

// logFailure logs a retryable failure: at warning level when an outage
// starts and then at most every outageLogEvery, with the failures since
// the last line and what waits in the queue; every attempt at debug level.
func (e *Exporter) logFailure(attempt int, delay time.Duration, err error) {
	now := time.Now()
	e.outageFails++
	switch {
	case e.outageSince.IsZero():
		e.outageSince, e.outageLogged, e.outageFails = now, now, 0
		e.log.Warn("export failed, will retry", "attempt", attempt, "retry_in", delay, "error", err)
	case now.Sub(e.outageLogged) >= e.outageLogEvery:
		e.mu.Lock()
		queued := len(e.queue)
		e.mu.Unlock()
		e.log.Warn("export still failing", "for", now.Sub(e.outageSince).Round(time.Second),
			"failed_attempts", e.outageFails, "queued_batches", queued, "retry_in", delay, "error", err)
		e.outageLogged, e.outageFails = now, 0
	default:
		e.log.Debug("export failed, will retry", "attempt", attempt, "retry_in", delay, "error", err)
	}
}

// send makes one export request with the batch's bytes as its body.
func (e *Exporter) send(b Batch) error {
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.Timeout)
	defer cancel()
	md := e.md.Copy()
	// The schema version pdata's own client announces.
	md.Set(pprofileotlp.DevelopmentVersionHeader, pprofileotlp.DevelopmentVersion)
	ctx = metadata.NewOutgoingContext(ctx, md)
	resp := pprofileotlp.NewExportResponse()
	t0 := time.Now()
	err := e.conn.Invoke(ctx, exportMethod, rawRequest(b.data), resp, grpc.ForceCodec(rawCodec{}))
	e.m.exportDuration.WithLabelValues(e.endpoint).Observe(time.Since(t0).Seconds())
	result := "success"
	if err != nil {
		result = status.Code(err).String()
	}
	e.m.exportRequests.WithLabelValues(e.endpoint, result).Inc()
	if err != nil {
		return err
	}
	if ps := resp.PartialSuccess(); ps.RejectedProfiles() > 0 || ps.ErrorMessage() != "" {
		e.m.rejectedProfiles.WithLabelValues(e.endpoint).Add(float64(ps.RejectedProfiles()))
		e.log.Warn("collector accepted the batch in part", "rejected_profiles", ps.RejectedProfiles(), "message", ps.ErrorMessage())
	}
	return nil
}

// retryable reports whether err is worth retrying, per the OTLP
// specification's list of retryable gRPC codes, and the delay the server
// asked for (RetryInfo), if any.
func retryable(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, !errors.Is(err, context.Canceled)
	}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted,
		codes.OutOfRange, codes.Unavailable, codes.DataLoss:
	default:
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, true
}

// jitter spreads retries of many agents: d ± 20 %.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.4-0.2)*float64(d))
}

// exportMethod is the OTLP profiles service's one method.
const exportMethod = "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"

// rawRequest is an export request already in protobuf form.
type rawRequest []byte

// rawCodec sends a rawRequest as it is and decodes the response with
// pdata, so a batch is encoded once however often it is sent.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	r, ok := v.(rawRequest)
	if !ok {
		return nil, fmt.Errorf("encode %T: not a raw request", v)
	}
	return r, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	r, ok := v.(pprofileotlp.ExportResponse)
	if !ok {
		return fmt.Errorf("decode into %T: not an export response", v)
	}
	return r.UnmarshalProto(data)
}
