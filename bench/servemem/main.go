// Command servemem measures the memory of `spanprof serve --otlp-listen`
// under a long stream: an hour of profiles from 200 processes (each
// reporting every 10 s, as agents do) plus traces, compressed in time: the
// exports are sent at full speed with timestamps spanning the hour. It
// samples serve's RSS from /proc and its live Go heap from the runtime's
// GC trace, reads the window's counters from /api/window, and fails when
// the memory after the window first filled keeps growing.
//
//	go run ./bench/servemem -spanprof bin/spanprof
//
// The window's age limit counts receive time, so in a compressed stream
// only its size limits (--window-samples, --window-bytes, --window-spans)
// bound it; these are what the run shows bounded. With -realtime the
// stream takes its own length in wall time (an hour by default), so the
// age limit and the collector's pacing run as in production; -log gets a
// line of RSS, heap and window counters every -log-every.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spanprof/spanprof/internal/export/otlp"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/web/live"
)

type config struct {
	spanprof          string
	processes         int
	stream, interval  time.Duration
	hz                int
	tracesPerSec      int
	windowSamples     int
	windowSpans       int
	windowBytes       int64
	realtime          bool
	logFile           string
	logEvery          time.Duration
	growthLimit       float64
	out               string
	distinctFunctions int
}

func main() {
	var c config
	flag.StringVar(&c.spanprof, "spanprof", "bin/spanprof", "spanprof binary")
	flag.IntVar(&c.processes, "processes", 200, "processes streaming profiles")
	flag.DurationVar(&c.stream, "stream", time.Hour, "time the stream's timestamps span")
	flag.DurationVar(&c.interval, "interval", 10*time.Second, "report interval of each process")
	flag.IntVar(&c.hz, "hz", 19, "on-CPU samples per second per process (the agent's default frequency on a busy thread)")
	flag.IntVar(&c.tracesPerSec, "traces-per-second", 30, "traces (3 spans each) per second of stream time")
	flag.IntVar(&c.windowSamples, "window-samples", live.DefaultLimits.MaxSamples, "serve --window-samples")
	flag.IntVar(&c.windowSpans, "window-spans", live.DefaultLimits.MaxSpans, "serve --window-spans")
	flag.Int64Var(&c.windowBytes, "window-bytes", live.DefaultLimits.MaxBytes, "serve --window-bytes")
	flag.BoolVar(&c.realtime, "realtime", false, "send each report when its time comes: the stream takes -stream of wall time")
	flag.StringVar(&c.logFile, "log", "", "append a line of memory and window counters to this file every -log-every")
	flag.DurationVar(&c.logEvery, "log-every", time.Minute, "period of the -log lines")
	flag.Float64Var(&c.growthLimit, "growth-limit", 1.15, "fail when the peak RSS of the stream's second half exceeds the RSS at its middle by this factor")
	flag.IntVar(&c.distinctFunctions, "functions", 3000, "distinct function names across the processes")
	flag.StringVar(&c.out, "out", "", "append the result table to this file")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "servemem:", err)
		os.Exit(1)
	}
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// gcLine matches the GC trace's "A->B->C MB": C is the live heap.
var gcLine = regexp.MustCompile(`(\d+)->(\d+)->(\d+) MB`)

type mem struct {
	pid              int
	rss, hwm, heapMB atomic.Int64
	peakHeapMB       atomic.Int64
}

func (m *mem) readProc() {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.pid))
	if err != nil {
		return
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			m.rss.Store(v)
		case "VmHWM:":
			m.hwm.Store(v)
		}
	}
}

func run(c config) error {
	otlpAddr, err := freeAddr()
	if err != nil {
		return err
	}
	webAddr, err := freeAddr()
	if err != nil {
		return err
	}
	cmd := exec.Command(c.spanprof, "serve", "--listen", webAddr, "--otlp-listen", otlpAddr,
		"--window-samples", strconv.Itoa(c.windowSamples), "--window-spans", strconv.Itoa(c.windowSpans),
		"--window-bytes", strconv.FormatInt(c.windowBytes, 10))
	cmd.Env = append(os.Environ(), "GODEBUG=gctrace=1")
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start serve: %w", err)
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	m := &mem{pid: cmd.Process.Pid}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if g := gcLine.FindStringSubmatch(sc.Text()); g != nil {
				live, _ := strconv.ParseInt(g[3], 10, 64)
				m.heapMB.Store(live)
				if live > m.peakHeapMB.Load() {
					m.peakHeapMB.Store(live)
				}
			}
		}
	}()
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "spanprof:") {
		return fmt.Errorf("serve did not start: %q", sc.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	conn, err := grpc.NewClient(otlpAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return err
	}
	defer conn.Close()
	profiles, traces := pprofileotlp.NewGRPCClient(conn), ptraceotlp.NewGRPCClient(conn)
	ctx := context.Background()

	stop := make(chan struct{})
	var polled sync.WaitGroup
	polled.Add(1)
	go func() {
		defer polled.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			m.readProc()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()

	funcs := make([]string, c.distinctFunctions)
	for i := range funcs {
		funcs[i] = fmt.Sprintf("pkg%d.(*Type%d).Method%d", i%40, i%200, i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	// 64 stacks per process, 8-24 frames, from the shared names.
	stacks := make([][][]profile.Frame, c.processes)
	for p := range stacks {
		for range 64 {
			st := make([]profile.Frame, 8+rng.IntN(17))
			for i := range st {
				f := rng.IntN(len(funcs))
				st[i] = profile.Frame{Function: funcs[f], Address: 0x400000 + uint64(f)*64}
			}
			stacks[p] = append(stacks[p], st)
		}
	}
	t0 := time.Now().Add(-c.stream).Truncate(time.Second)
	if c.realtime {
		t0 = time.Now()
	}
	if c.logFile != "" {
		stopLog, err := logEvery(c, m, webAddr)
		if err != nil {
			return err
		}
		defer stopLog()
	}
	steps := int(c.stream / c.interval)
	perBatch := c.hz * int(c.interval/time.Second)
	fmt.Printf("serve pid %d: %d processes × %d reports of %d on-CPU + %d off-CPU samples, %d traces/s; window limits %d samples, %d MiB, %d spans\n",
		m.pid, c.processes, steps, perBatch, perBatch/4, c.tracesPerSec, c.windowSamples, c.windowBytes>>20, c.windowSpans)
	fmt.Printf("%8s %12s %10s %10s %10s %10s %9s %9s\n", "stream", "sent samples", "window", "evicted", "spans", "ev. spans", "RSS MiB", "heap MiB")
	var rssFull int64 // RSS when the sample window first filled
	var rssHalf int64 // RSS in the middle of the stream, with a full window
	start := time.Now()
	var sent uint64
	for k := range steps {
		at := t0.Add(time.Duration(k) * c.interval)
		if c.realtime {
			time.Sleep(time.Until(at))
		}
		// Traces of this interval: root, a CPU child, a waiting child.
		td := ptrace.NewTraces()
		type link struct {
			trace [16]byte
			span  [8]byte
		}
		var links []link
		n := c.tracesPerSec * int(c.interval/time.Second)
		for range n {
			svc := rng.IntN(c.processes)
			rs := td.ResourceSpans().AppendEmpty()
			rs.Resource().Attributes().PutStr("service.name", fmt.Sprintf("svc-%d", svc%20))
			ss := rs.ScopeSpans().AppendEmpty()
			var tid [16]byte
			var ids [3][8]byte
			fill(rng, tid[:])
			st := at.Add(time.Duration(rng.Int64N(int64(c.interval))))
			for j, name := range []string{"GET /api", "compute", "db query"} {
				fill(rng, ids[j][:])
				sp := ss.Spans().AppendEmpty()
				sp.SetTraceID(pcommon.TraceID(tid))
				sp.SetSpanID(pcommon.SpanID(ids[j]))
				if j > 0 {
					sp.SetParentSpanID(pcommon.SpanID(ids[0]))
				}
				sp.SetName(name)
				sp.SetStartTimestamp(pcommon.NewTimestampFromTime(st))
				sp.SetEndTimestamp(pcommon.NewTimestampFromTime(st.Add(200 * time.Millisecond)))
			}
			links = append(links, link{tid, ids[1]}, link{tid, ids[2]})
		}
		if _, err := traces.Export(ctx, ptraceotlp.NewExportRequestFromTraces(td)); err != nil {
			return fmt.Errorf("export traces: %w", err)
		}
		for p := range c.processes {
			pid := uint32(1000 + p)
			pr := &profile.Profile{Start: at, End: at.Add(c.interval), Frequency: c.hz,
				Processes: map[uint32]*profile.Process{pid: {PID: pid, ExeName: fmt.Sprintf("svc-%d", p%20), ServiceName: fmt.Sprintf("svc-%d", p%20)}}}
			for i := range perBatch + perBatch/4 {
				s := profile.Sample{Kind: profile.OnCPU, PID: pid, TID: pid + uint32(i%4), Value: 1,
					Frames: stacks[p][rng.IntN(64)], Time: at.Add(time.Duration(i) * c.interval / time.Duration(perBatch+perBatch/4))}
				if i >= perBatch {
					s.Kind, s.Value, s.State, s.Reason = profile.OffCPU, rng.Int64N(50e6), "S", "futex_wait_queue"
				}
				if i%5 == 0 && len(links) > 0 {
					l := links[rng.IntN(len(links))]
					s.Link = profile.Link{TraceID: l.trace, SpanID: l.span}
				}
				pr.Samples = append(pr.Samples, s)
			}
			if _, err := profiles.Export(ctx, pprofileotlp.NewExportRequestFromProfiles(otlp.Build(pr))); err != nil {
				return fmt.Errorf("export profiles: %w", err)
			}
			sent += uint64(len(pr.Samples))
		}
		if k%(steps/12) == steps/12-1 || k == steps-1 {
			var st live.Stats
			if err := getJSON("http://"+webAddr+"/api/window", &st); err != nil {
				return err
			}
			if rssFull == 0 && st.EvictedSamplesSize+st.EvictedSamplesBytes+st.EvictedSamplesAge > 0 {
				rssFull = m.rss.Load()
			}
			if rssHalf == 0 && k >= steps/2 {
				rssHalf = m.hwm.Load()
			}
			fmt.Printf("%7.0fm %12d %10d %10d %10d %10d %9.0f %9d\n", float64(k+1)*c.interval.Minutes(), sent, st.Samples,
				st.EvictedSamplesSize+st.EvictedSamplesBytes+st.EvictedSamplesAge, st.Spans, st.EvictedSpansSize+st.EvictedSpansAge,
				float64(m.rss.Load())/1024, m.heapMB.Load())
		}
	}
	elapsed := time.Since(start)
	// A reader over the full window: the trace list, as the page loads it.
	q := time.Now()
	var list []live.TraceSummary
	if err := getJSON("http://"+webAddr+"/api/traces?limit=1000", &list); err != nil {
		return err
	}
	listTook := time.Since(q)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	polled.Wait()
	m.readProc()
	res := fmt.Sprintf("serve memory under %v of stream from %d processes (%d samples, %d spans sent in %v): peak RSS %.0f MiB (VmHWM), RSS at the first full window %.0f MiB, peak RSS at the middle %.0f MiB, final RSS %.0f MiB, peak live heap %d MiB; /api/traces over the full window in %v\n",
		c.stream, c.processes, sent, steps*c.tracesPerSec*int(c.interval/time.Second)*3, elapsed.Round(time.Second),
		float64(m.hwm.Load())/1024, float64(rssFull)/1024, float64(rssHalf)/1024, float64(m.rss.Load())/1024, m.peakHeapMB.Load(), listTook.Round(time.Millisecond))
	fmt.Print(res)
	if c.out != "" {
		f, err := os.OpenFile(c.out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		fmt.Fprintf(f, "\n## serve --otlp-listen memory\n\n%s", res)
		f.Close()
	}
	if rssFull == 0 || rssFull > rssHalf {
		return fmt.Errorf("the sample window was not full by the middle of the stream: send more (raise -hz or -stream) to show it bounded")
	}
	// The Go heap grows up to twice the live heap before a collection, so
	// RSS settles a while after the window fills; the second half shows
	// whether it keeps growing.
	if g := float64(m.hwm.Load()) / float64(rssHalf); g > c.growthLimit {
		return fmt.Errorf("peak RSS grew %.2f× over the stream's second half (limit %.2f): memory not bounded by the window", g, c.growthLimit)
	}
	return nil
}

func fill(r *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("get %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// logEvery appends a line of serve's memory and the window's counters to
// c.logFile every c.logEvery until the returned stop is called.
func logEvery(c config, m *mem, webAddr string) (func(), error) {
	f, err := os.OpenFile(c.logFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	fmt.Fprintf(f, "# servemem: %d processes, stream %v, realtime %v, limits %d samples %d MiB %d spans\n",
		c.processes, c.stream, c.realtime, c.windowSamples, c.windowBytes>>20, c.windowSpans)
	fmt.Fprintf(f, "%-20s %8s %10s %10s %9s %12s %12s %12s %9s %10s %8s %8s %8s\n", "time", "elapsed", "received", "window", "est MiB",
		"ev. count", "ev. bytes", "ev. age", "spans", "ev. spans", "RSS MiB", "HWM MiB", "heap MiB")
	start := time.Now()
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(c.logEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			var st live.Stats
			if err := getJSON("http://"+webAddr+"/api/window", &st); err != nil {
				fmt.Fprintf(f, "# %v\n", err)
				continue
			}
			m.readProc()
			fmt.Fprintf(f, "%-20s %8s %10d %10d %9.0f %12d %12d %12d %9d %10d %8.0f %8.0f %8d\n", time.Now().UTC().Format(time.DateTime),
				time.Since(start).Round(time.Second), st.ReceivedSamples, st.Samples, float64(st.Bytes)/(1<<20),
				st.EvictedSamplesSize, st.EvictedSamplesBytes, st.EvictedSamplesAge, st.Spans, st.EvictedSpansSize+st.EvictedSpansAge,
				float64(m.rss.Load())/1024, float64(m.hwm.Load())/1024, m.heapMB.Load())
		}
	}()
	return func() { close(done); <-stopped; f.Close() }, nil
}
