package agent

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spanprof/spanprof/internal/cli"
)

// LookupEnv reads an environment variable; os.LookupEnv in production.
type LookupEnv func(key string) (string, bool)

// listFlag is a repeatable flag that also splits on commas.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	*l = append(*l, splitList(s)...)
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// ParseArgs builds the configuration of `spanprof agent` from its
// arguments, the environment and the file named by --config (or
// SPANPROF_CONFIG). Precedence: flag > env > file > default. The result is
// validated; flag.ErrHelp is returned for -h.
func ParseArgs(args []string, env LookupEnv, help io.Writer) (Config, error) {
	var (
		configPath, hostName, caFile, logLevel string
		endpoints, pids, execs, headers        listFlag
		debugDirs                              listFlag
	)
	cfg := Default()
	fs := flag.NewFlagSet("spanprof agent", flag.ContinueOnError)
	fs.StringVar(&configPath, "config", "", "YAML configuration `FILE` (env SPANPROF_CONFIG)")
	fs.Var(&endpoints, "endpoint", "collector OTLP/gRPC `HOST:PORT` (repeatable; default localhost:4317)")
	insecure := fs.Bool("insecure", false, "send in plaintext, without TLS")
	fs.StringVar(&caFile, "ca-file", "", "verify the collector with this CA `FILE`")
	fs.Var(&headers, "header", "`KEY=VALUE` sent with every export (repeatable)")
	interval := cli.Duration(fs, "report-interval", 0, "how often a profile is sent (default 10s)")
	fs.Var(&pids, "pid", "profile this process (repeatable; default: all processes)")
	fs.Var(&execs, "executable", "profile processes of this executable `NAME` (repeatable)")
	freq := fs.Int("frequency", 0, "on-CPU samples per second per CPU (default 19)")
	goWaitFreq := fs.Int("go-wait-frequency", 0, "with --off-cpu, samples per second of parked goroutines of Go processes (default 19; 0 off)")
	offCPU := fs.Bool("off-cpu", false, "also record off-CPU time (sched_switch)")
	offCPUThreshold := cli.Duration(fs, "off-cpu-threshold", 0, "off-CPU sampling threshold: waits of a thread are captured about once per threshold, weighted to stay unbiased (default 2ms)")
	metrics := fs.String("metrics-listen", "", "serve /metrics and /healthz on `HOST:PORT` (default 127.0.0.1:9464; \"off\" disables)")
	fs.StringVar(&hostName, "host-name", "", "host.name resource attribute (default: the host name)")
	fs.StringVar(&logLevel, "log-level", "", "debug, info, warn or error (default info)")
	symMode := fs.String("symbolize", "", "none (addresses and build IDs for the backend), local (offline) or full (adds debuginfod) (default full when debuginfod URLs are set, else local)")
	fs.Var(&debugDirs, "debug-dir", "search `DIR` for separate debug files (repeatable)")
	cacheMiB := fs.Int("symbol-cache-mib", 0, "memory budget, in MiB, of the parsed binaries: symbol tables, Go pclntabs, DWARF unit tables and unwind tables (a quarter); least recently used evicted first, counted (spanprof_symbolize_objects_evicted_total, spanprof_unwind_tables_evicted_total) (default 32; configuration symbolization.cache_mib)")
	noJVMPerfmap := fs.Bool("no-jvm-perfmap", false, "do not ask running JVMs (HotSpot attach, Compiler.perfmap) to write /tmp/perf-PID.map; Java frames then stay addresses unless the JVM writes the map itself")
	if err := cli.Parse(fs, args, help); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	if configPath == "" {
		configPath, _ = env("SPANPROF_CONFIG")
	}
	if configPath != "" {
		if err := LoadFile(configPath, &cfg); err != nil {
			return cfg, err
		}
	}
	if err := applyEnv(&cfg, env); err != nil {
		return cfg, err
	}

	if set["endpoint"] {
		cfg.Export.Endpoints = endpoints
	}
	if set["insecure"] {
		cfg.Export.TLS.Insecure = *insecure
	}
	if set["ca-file"] {
		cfg.Export.TLS.CAFile = caFile
	}
	if set["header"] {
		cfg.Export.Headers = map[string]string{}
		if err := parseHeaders(headers, cfg.Export.Headers); err != nil {
			return cfg, err
		}
	}
	if set["report-interval"] {
		cfg.Export.ReportInterval = *interval
	}
	if set["pid"] {
		cfg.Processes.PIDs = nil
		if err := parsePIDs(pids, &cfg.Processes.PIDs); err != nil {
			return cfg, err
		}
	}
	if set["executable"] {
		cfg.Processes.Executables = execs
	}
	if set["frequency"] {
		cfg.Frequency = *freq
	}
	if set["go-wait-frequency"] {
		cfg.GoWaitFrequency = *goWaitFreq
	}
	if set["off-cpu"] {
		cfg.OffCPU = *offCPU
	}
	if set["off-cpu-threshold"] {
		cfg.OffCPUThreshold = *offCPUThreshold
	}
	if set["metrics-listen"] {
		cfg.MetricsListen = *metrics
	}
	if set["host-name"] {
		cfg.HostName = hostName
	}
	if set["log-level"] {
		cfg.LogLevel = logLevel
	}
	if set["symbolize"] {
		cfg.Symbolization.Mode = *symMode
	}
	if set["debug-dir"] {
		cfg.Symbolization.DebugDirs = debugDirs
	}
	if set["symbol-cache-mib"] {
		cfg.Symbolization.CacheMiB = *cacheMiB
	}
	if set["no-jvm-perfmap"] {
		cfg.Symbolization.NoJVMPerfmap = *noJVMPerfmap
	}
	if cfg.MetricsListen == "off" {
		cfg.MetricsListen = ""
	}
	return cfg, cfg.Validate()
}

// applyEnv overrides cfg with the SPANPROF_* variables that are set.
func applyEnv(cfg *Config, env LookupEnv) error {
	str := map[string]*string{
		"SPANPROF_CA_FILE":        &cfg.Export.TLS.CAFile,
		"SPANPROF_COMPRESSION":    &cfg.Export.Compression,
		"SPANPROF_METRICS_LISTEN": &cfg.MetricsListen,
		"SPANPROF_SYMBOLIZATION":  &cfg.Symbolization.Mode,
		"SPANPROF_HOST_NAME":      &cfg.HostName,
		"SPANPROF_LOG_LEVEL":      &cfg.LogLevel,
	}
	for k, p := range str {
		if v, ok := env(k); ok {
			*p = v
		}
	}
	lists := map[string]*[]string{
		"SPANPROF_ENDPOINT":        &cfg.Export.Endpoints,
		"SPANPROF_EXECUTABLES":     &cfg.Processes.Executables,
		"SPANPROF_DEBUGINFOD_URLS": &cfg.Symbolization.DebuginfodURLs,
		"SPANPROF_DEBUG_DIRS":      &cfg.Symbolization.DebugDirs,
	}
	for k, p := range lists {
		if v, ok := env(k); ok {
			*p = splitList(v)
		}
	}
	durations := map[string]*time.Duration{
		"SPANPROF_REPORT_INTERVAL":   &cfg.Export.ReportInterval,
		"SPANPROF_EXPORT_TIMEOUT":    &cfg.Export.Timeout,
		"SPANPROF_OFF_CPU_THRESHOLD": &cfg.OffCPUThreshold,
	}
	for k, p := range durations {
		if v, ok := env(k); ok {
			d, err := cli.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%s: not a duration: %q: %v", k, v, err)
			}
			*p = d
		}
	}
	ints := map[string]*int{
		"SPANPROF_FREQUENCY":         &cfg.Frequency,
		"SPANPROF_GO_WAIT_FREQUENCY": &cfg.GoWaitFrequency,
		"SPANPROF_QUEUE_SIZE":        &cfg.Export.QueueSize,
		"SPANPROF_QUEUE_MIB":         &cfg.Export.QueueMiB,
	}
	for k, p := range ints {
		if v, ok := env(k); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%s: not a number: %q", k, v)
			}
			*p = n
		}
	}
	bools := map[string]*bool{
		"SPANPROF_INSECURE":       &cfg.Export.TLS.Insecure,
		"SPANPROF_OFF_CPU":        &cfg.OffCPU,
		"SPANPROF_NO_JVM_PERFMAP": &cfg.Symbolization.NoJVMPerfmap,
	}
	for k, p := range bools {
		if v, ok := env(k); ok {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%s: not a boolean: %q", k, v)
			}
			*p = b
		}
	}
	if v, ok := env("SPANPROF_PIDS"); ok {
		cfg.Processes.PIDs = nil
		if err := parsePIDs(splitList(v), &cfg.Processes.PIDs); err != nil {
			return fmt.Errorf("SPANPROF_PIDS: %w", err)
		}
	}
	if v, ok := env("SPANPROF_HEADERS"); ok {
		cfg.Export.Headers = map[string]string{}
		if err := parseHeaders(splitList(v), cfg.Export.Headers); err != nil {
			return fmt.Errorf("SPANPROF_HEADERS: %w", err)
		}
	}
	return nil
}

func parsePIDs(in []string, dst *[]int) error {
	for _, s := range in {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return fmt.Errorf("not a process id: %q", s)
		}
		*dst = append(*dst, n)
	}
	return nil
}

// parseHeaders reads KEY=VALUE pairs; the value may itself contain '='.
func parseHeaders(in []string, dst map[string]string) error {
	for _, kv := range in {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("header %q: want KEY=VALUE", kv)
		}
		dst[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return nil
}
