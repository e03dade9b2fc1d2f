// Command servestore measures `spanprof serve --store clickhouse://…`
// under a fleet: recorded agent output replayed as -nodes nodes sampling
// at -hz on -cpus busy CPUs each, reporting every -interval, for -stream
// of timestamps, with -traces traces per second per node. Time is
// compressed: exports go as fast as serve takes them, and the run
// reports the samples per second ingested (written into ClickHouse),
// the CPU and peak memory of serve and of clickhouse-server, the time to
// open one trace of the hour, and ClickHouse's disk bytes per sample
// (system.parts).
//
//	go run ./bench/servestore -spanprof bin/spanprof [-input recorded.otlp.pb]
//	    [-reference OTHER-BUILD -rounds N] [-cpuprofile DIR]
//
// With -reference the two builds run in turn, N rounds each, the order
// alternating by round, each on a fresh ClickHouse, and a table sets
// their CPU per sample side by side: on a shared machine, the figure to
// compare builds by.
//
// Without the -input file it records 10 s of this machine into it first (`spanprof record
// --all --off-cpu --frequency 99`, root), so the stacks, threads and
// off-CPU reasons are an agent's, not made up.
package main

import (
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
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/spanprof/spanprof/internal/export/otlp"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/web/live"
	"github.com/spanprof/spanprof/internal/web/live/chstore/chtest"
)

type config struct {
	spanprof, input, out, dir string
	reference, cpuprofile     string
	nodes, hz, cpus, traces   int
	senders, rounds           int
	offCPU                    bool
	stream, interval          time.Duration
}

// result is one run's figures, for the comparison of two builds.
type result struct {
	samples             float64
	ingestSec           float64
	serveCPU, chCPU     float64 // seconds
	serveRSS, chRSS     int64   // peak KiB
	openMedian          time.Duration
	bytesPerSample      float64
	droppedSamples      uint64
	loadAtEnd, markdown string
}

func main() {
	var c config
	flag.StringVar(&c.spanprof, "spanprof", "bin/spanprof", "spanprof binary")
	flag.StringVar(&c.input, "input", "out/bench/servestore-recorded.otlp.pb", "recorded agent output (.otlp.pb or .otlp.json); recorded now when the file is missing")
	flag.StringVar(&c.out, "out", "", "append the results as markdown to this file")
	flag.StringVar(&c.dir, "dir", "", "directory for ClickHouse's data (a temporary one by default)")
	flag.IntVar(&c.nodes, "nodes", 20, "nodes")
	flag.IntVar(&c.hz, "hz", 99, "on-CPU samples per second per CPU")
	flag.IntVar(&c.cpus, "cpus", 2, "busy CPUs per node")
	flag.IntVar(&c.traces, "traces", 2, "traces per second per node (a root span of 200 ms and a child of 100 ms)")
	flag.IntVar(&c.senders, "senders", 4, "exports in flight at once")
	flag.DurationVar(&c.stream, "stream", time.Hour, "time the replayed timestamps span")
	flag.DurationVar(&c.interval, "interval", 10*time.Second, "report interval of each node's agent")
	flag.BoolVar(&c.offCPU, "off-cpu", true, "replay the recording's off-CPU events too, as often per interval as recorded (false: on-CPU samples only)")
	flag.StringVar(&c.reference, "reference", "", "another spanprof build to run in the same rounds, alternating with -spanprof (a before/after comparison)")
	flag.IntVar(&c.rounds, "rounds", 1, "runs of each build; with -reference the order alternates by round")
	flag.StringVar(&c.cpuprofile, "cpuprofile", "", "write a Go CPU profile of each run's serve into this directory (serve-BUILD-ROUND.pprof)")
	flag.Parse()
	if err := runAll(c); err != nil {
		fmt.Fprintf(os.Stderr, "servestore: %v\n", err)
		os.Exit(1)
	}
}

// runAll records the input if it is missing, then runs each build
// -rounds times (alternating with -reference) and, with more than one
// run, prints a table of CPU per sample and throughput per run.
func runAll(c config) error {
	if _, err := os.Stat(c.input); os.IsNotExist(err) {
		if err := os.MkdirAll(filepath.Dir(c.input), 0o755); err != nil {
			return err
		}
		fmt.Println("recording 10 s of this machine (spanprof record --all --off-cpu --frequency 99)...")
		cmd := exec.Command(c.spanprof, "record", "--all", "--off-cpu", "--frequency", "99", "--duration", "10s", "--output", c.input)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("record agent output: %w", err)
		}
	}
	builds := []string{c.spanprof}
	if c.reference != "" {
		builds = append(builds, c.reference)
	}
	type row struct {
		round int
		build string
		r     result
	}
	var rows []row
	for round := range max(1, c.rounds) {
		order := slices.Clone(builds)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, bin := range order {
			rc := c
			rc.spanprof = bin
			prof := ""
			if c.cpuprofile != "" {
				label := "spanprof"
				if bin == c.reference {
					label = "reference"
				}
				prof = filepath.Join(c.cpuprofile, fmt.Sprintf("serve-%s-%d.pprof", label, round+1))
			}
			fmt.Printf("round %d: %s\n", round+1, bin)
			r, err := run(rc, prof)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", bin, round+1, err)
			}
			fmt.Print(r.markdown)
			if c.out != "" {
				if err := appendFile(c.out, r.markdown); err != nil {
					return err
				}
			}
			rows = append(rows, row{round + 1, bin, r})
		}
	}
	if len(rows) < 2 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Runs side by side\n\n")
	fmt.Fprintf(&b, "| round | build | serve CPU per sample | clickhouse CPU per sample | samples/s | serve peak RSS | load average at the end |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %d | %s | %.2f µs | %.2f µs | %.0f | %d MiB | %s |\n", r.round, r.build, 1e6*r.r.serveCPU/r.r.samples,
			1e6*r.r.chCPU/r.r.samples, r.r.samples/r.r.ingestSec, r.r.serveRSS>>10, r.r.loadAtEnd)
	}
	fmt.Print(b.String())
	if c.out != "" {
		return appendFile(c.out, b.String())
	}
	return nil
}

func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// run is one run of one build; with prof, serve writes its CPU profile
// there (SPANPROF_CPUPROFILE).
func run(c config, prof string) (res result, err error) {
	tmp, err := os.MkdirTemp("", "servestore")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(tmp)
	rec, err := readProfile(c.input)
	if err != nil {
		return res, err
	}
	var on, off []profile.Sample
	for _, s := range rec.Samples {
		s.Link = profile.Link{}
		if s.Kind == profile.OffCPU {
			off = append(off, s)
		} else {
			on = append(on, s)
		}
	}
	if len(on) == 0 {
		return res, fmt.Errorf("%s: no on-CPU samples to replay", c.input)
	}
	dir := c.dir
	if dir == "" {
		dir = filepath.Join(tmp, "clickhouse")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	ch, err := chtest.New(dir)
	if err != nil {
		return res, err
	}
	if err := ch.StartServer(); err != nil {
		return res, err
	}
	defer ch.Down()
	otlpAddr, webAddr := freePort(), freePort()
	srv := exec.Command(c.spanprof, "serve", "--listen", webAddr, "--otlp-listen", otlpAddr, "--store", ch.URL("bench"), "--store-buffer", "128MiB")
	srv.Stderr = os.Stderr
	if prof != "" {
		srv.Env = append(os.Environ(), "SPANPROF_CPUPROFILE="+prof)
	}
	srv.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := srv.Start(); err != nil {
		return res, err
	}
	defer func() { _ = srv.Process.Signal(os.Interrupt); _ = srv.Wait() }()
	// Interrupted, stop serve and ClickHouse and remove the data.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		<-sig
		_ = srv.Process.Kill()
		ch.Down()
		os.RemoveAll(tmp)
		os.Exit(1)
	}()
	if err := waitHTTP("http://" + webAddr + "/healthz"); err != nil {
		return res, err
	}
	conn, err := grpc.NewClient(otlpAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return res, err
	}
	defer conn.Close()
	profiles, traces := pprofileotlp.NewGRPCClient(conn), ptraceotlp.NewGRPCClient(conn)

	perInterval := c.hz * c.cpus * int(c.interval/time.Second)
	// Off-CPU events come as often per interval as in the recording:
	// they depend on the workload, not on the frequency.
	recDur := rec.End.Sub(rec.Start)
	if recDur <= 0 {
		recDur = 10 * time.Second
	}
	offPer := int(int64(len(off)) * int64(c.interval) / int64(recDur))
	if !c.offCPU {
		offPer = 0
	}
	intervals := int(c.stream / c.interval)
	nTraces := c.traces * int(c.interval/time.Second)
	fmt.Printf("replaying %s (%d on-CPU, %d off-CPU samples, %d processes) as %d nodes × %d intervals of %v: %d on-CPU + %d off-CPU samples and %d traces per export\n",
		c.input, len(on), len(off), len(rec.Processes), c.nodes, intervals, c.interval, perInterval, offPer, nTraces)

	cpu0 := map[string]float64{"serve": cpuSeconds(srv.Process.Pid), "clickhouse": cpuSeconds(ch.Pid()), "replay client": cpuSeconds(os.Getpid())}
	var peak struct {
		sync.Mutex
		serve, ch int64
	}
	stopPoll := make(chan struct{})
	go func() {
		for {
			select {
			case <-stopPoll:
				return
			case <-time.After(500 * time.Millisecond):
			}
			peak.Lock()
			peak.serve = max(peak.serve, rssKiB(srv.Process.Pid))
			peak.ch = max(peak.ch, rssKiB(ch.Pid()))
			peak.Unlock()
		}
	}()
	start := time.Now().Add(-c.stream - time.Hour).Truncate(time.Hour)
	// Each node's export is built once (otlp.Build, as the agent does)
	// and then, interval after interval, shifted in time with fresh trace
	// ids written into its link table: the replay client shares the CPUs
	// with serve and ClickHouse, so it does no more than marshal.
	nodes := make([]*nodeTemplate, c.nodes)
	rnd := rand.New(rand.NewPCG(1, 2))
	for n := range nodes {
		nodes[n] = newTemplate(rec, on, off, n, start, c.interval, perInterval, offPer, nTraces, rnd)
	}
	var sent, sentSpans, retries atomic.Int64
	var firstErr atomic.Value
	var sampleTraces sync.Map // a few trace ids to open afterwards
	var progress atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for k := range c.senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(k), 7))
			for i := range intervals {
				for n := k; n < c.nodes; n += c.senders {
					tm := nodes[n]
					td, ids := tm.next(time.Duration(i)*c.interval, rnd)
					// As agents and collectors do, an export refused as
					// UNAVAILABLE (serve's buffer is nearly full) is sent
					// again after a pause.
					retry := func(send func(ctx context.Context) error) {
						for pause := 20 * time.Millisecond; ; pause = min(2*pause, time.Second) {
							ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
							err := send(ctx)
							cancel()
							if status.Code(err) != codes.Unavailable {
								if err != nil {
									firstErr.CompareAndSwap(nil, err)
								}
								return
							}
							retries.Add(1)
							time.Sleep(pause)
						}
					}
					retry(func(ctx context.Context) error {
						_, err := traces.Export(ctx, ptraceotlp.NewExportRequestFromTraces(td))
						return err
					})
					retry(func(ctx context.Context) error {
						_, err := profiles.Export(ctx, pprofileotlp.NewExportRequestFromProfiles(tm.pd))
						return err
					})
					sent.Add(int64(tm.samples))
					sentSpans.Add(int64(td.SpanCount()))
					if n == 0 && i%max(1, intervals/20) == intervals/40 {
						sampleTraces.Store(ids[0], true)
					}
				}
				if k == 0 && (i+1)%60 == 0 {
					progress.Store(int64(i + 1))
					fmt.Printf("  %d of %d intervals sent, %.0f samples/s sent so far\n", i+1, intervals, float64(sent.Load())/time.Since(t0).Seconds())
				}
			}
		}()
	}
	wg.Wait()
	sendDone := time.Since(t0)
	if err, _ := firstErr.Load().(error); err != nil {
		return res, fmt.Errorf("export: %w", err)
	}
	// Ingested means written into ClickHouse.
	var st live.Stats
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if err := getJSON("http://"+webAddr+"/api/window", &st); err != nil {
			return res, err
		}
		if st.Store != nil && int64(st.Store.WrittenSamples+st.Store.DroppedSamples) >= sent.Load() && st.Store.BufferedBatches == 0 {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("serve did not write everything within 10 min: %+v", st.Store)
		}
	}
	ingest := time.Since(t0)
	close(stopPoll)
	cpu1 := map[string]float64{"serve": cpuSeconds(srv.Process.Pid), "clickhouse": cpuSeconds(ch.Pid()), "replay client": cpuSeconds(os.Getpid())}
	hwmServe, hwmCH := hwmKiB(srv.Process.Pid), hwmKiB(ch.Pid())

	// Open traces of the hour: the JSON the trace page reads, then its
	// first span's flame graph.
	var ids []string
	sampleTraces.Range(func(k, _ any) bool { ids = append(ids, k.(string)); return true })
	slices.Sort(ids)
	var opens, flames []time.Duration
	for _, id := range ids {
		t := time.Now()
		var tv live.TraceView
		if err := getJSON("http://"+webAddr+"/api/trace/"+id, &tv); err != nil {
			return res, err
		}
		opens = append(opens, time.Since(t))
		if len(tv.Spans) != 2 || tv.Spans[0].Samples == 0 {
			return res, fmt.Errorf("trace %s: %d spans, %d samples in the root; want 2 spans with samples", id, len(tv.Spans), tv.Spans[0].Samples)
		}
		t = time.Now()
		if err := getJSON("http://"+webAddr+"/api/trace/"+id+"/flame?span_id="+tv.Spans[0].SpanID+"&kind=on", nil); err != nil {
			return res, err
		}
		flames = append(flames, time.Since(t))
	}
	parts := func() (rows, bytes, all int64, err error) {
		out, err := ch.Query("SELECT table, sum(rows), sum(bytes_on_disk) FROM system.parts WHERE database = 'bench' AND active GROUP BY table FORMAT TSV")
		if err != nil {
			return 0, 0, 0, err
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			if len(f) != 3 {
				continue
			}
			r, _ := strconv.ParseInt(f[1], 10, 64)
			b, _ := strconv.ParseInt(f[2], 10, 64)
			all += b
			if f[0] == "spanprof_samples" {
				rows, bytes = r, b
			}
		}
		return rows, bytes, all, nil
	}
	rows, bytes, all, err := parts()
	if err != nil {
		return res, err
	}
	if _, err := ch.Query("OPTIMIZE TABLE bench.spanprof_samples FINAL"); err != nil {
		return res, err
	}
	mrows, mbytes, mall, err := parts()
	if err != nil {
		return res, err
	}
	n := float64(sent.Load())
	var b strings.Builder
	fmt.Fprintf(&b, "\n## serve --store clickhouse (bench/servestore)\n\n")
	fmt.Fprintf(&b, "%d nodes × %d Hz × %d CPUs for %v (compressed), %d traces/s per node: %.0f samples (%d on-CPU and %d off-CPU per node and %v), %d spans; replayed from %s (%d on-CPU, %d off-CPU events in %v).\n\n",
		c.nodes, c.hz, c.cpus, c.stream, c.traces, n, perInterval, offPer, c.interval, sentSpans.Load(), filepath.Base(c.input), len(on), len(off), recDur)
	fmt.Fprintf(&b, "| figure | value |\n|---|---|\n")
	fmt.Fprintf(&b, "| build | %s |\n", c.spanprof)
	fmt.Fprintf(&b, "| sustained ingest (written into ClickHouse) | %.0f samples/s (%.1f s for the hour; sending took %.1f s) |\n", n/ingest.Seconds(), ingest.Seconds(), sendDone.Seconds())
	for _, k := range []string{"serve", "clickhouse", "replay client"} {
		fmt.Fprintf(&b, "| %s CPU | %.1f s (%.2f µs per sample), %.2f cores on average |\n", k, cpu1[k]-cpu0[k], 1e6*(cpu1[k]-cpu0[k])/n,
			(cpu1[k]-cpu0[k])/ingest.Seconds())
	}
	fmt.Fprintf(&b, "| serve memory | peak RSS %d MiB (VmHWM %d MiB) |\n", peak.serve>>10, hwmServe>>10)
	fmt.Fprintf(&b, "| clickhouse-server memory | peak RSS %d MiB (VmHWM %d MiB) |\n", peak.ch>>10, hwmCH>>10)
	fmt.Fprintf(&b, "| open one trace (/api/trace/ID), %d traces | median %v, max %v |\n", len(opens), median(opens), slices.Max(opens))
	fmt.Fprintf(&b, "| its first span's flame graph | median %v, max %v |\n", median(flames), slices.Max(flames))
	fmt.Fprintf(&b, "| disk, samples table | %.1f bytes/sample (%d rows, %d MiB) |\n", float64(bytes)/float64(rows), rows, bytes>>20)
	fmt.Fprintf(&b, "| disk, all tables (samples, stacks, spans) | %.1f bytes/sample |\n", float64(all)/n)
	fmt.Fprintf(&b, "| after OPTIMIZE FINAL | %.1f bytes/sample in the samples table (%d rows), %.1f all tables |\n", float64(mbytes)/float64(mrows), mrows, float64(mall)/n)
	fmt.Fprintf(&b, "| dropped by serve | %d samples, %d spans; %d exports refused as UNAVAILABLE while its buffer was full, sent again |\n",
		st.Store.DroppedSamples, st.Store.DroppedSpans, retries.Load())
	fmt.Fprintf(&b, "| machine | %d CPUs, load average %s at the end |\n", runtime.NumCPU(), loadavg())
	res = result{samples: n, ingestSec: ingest.Seconds(), serveCPU: cpu1["serve"] - cpu0["serve"], chCPU: cpu1["clickhouse"] - cpu0["clickhouse"],
		serveRSS: peak.serve, chRSS: peak.ch, openMedian: median(opens), bytesPerSample: float64(bytes) / float64(rows),
		droppedSamples: st.Store.DroppedSamples, loadAtEnd: loadavg(), markdown: b.String()}
	return res, nil
}

func binaryRand(r *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	b[0] |= 1
}

func readProfile(path string) (*profile.Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if strings.HasSuffix(path, ".json") {
		return otlp.ReadJSON(f)
	}
	return otlp.ReadProto(f)
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2].Round(time.Millisecond / 10)
}

func freePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitHTTP(url string) error {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not answering within 30s", url)
		}
	}
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(b, v)
}

// cpuSeconds is a process's user and system time (its threads').
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	sy, _ := strconv.ParseFloat(f[12], 64)
	return (u + sy) / 100 // USER_HZ
}

func statusKiB(pid int, key string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func rssKiB(pid int) int64 { return statusKiB(pid, "VmRSS") }
func hwmKiB(pid int) int64 { return statusKiB(pid, "VmHWM") }
