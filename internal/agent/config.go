// Package agent runs spanprof as a daemon: it samples continuously,
// builds one profile every report interval and exports it over OTLP/gRPC
// to one or more OpenTelemetry Collectors, with a bounded retry queue and
// Prometheus self-metrics.
package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/spanprof/spanprof/internal/pipeline"
)

// Config is everything the agent can be told, from the YAML file, SPANPROF_*
// environment variables and flags, in rising precedence.
type Config struct {
	// Frequency is the on-CPU sampling frequency in Hz per CPU.
	Frequency int `yaml:"frequency"`
	// GoWaitFrequency samples the parked goroutines of Go processes with
	// off-CPU on (waits no thread shows); 0 turns it off.
	GoWaitFrequency int `yaml:"go_wait_frequency"`
	// OffCPU turns on off-CPU sampling on sched_switch.
	OffCPU bool `yaml:"off_cpu"`
	// OffCPUThreshold tunes how often a thread's waits are captured
	// (sampler.OffCPUOptions.Threshold); totals stay unbiased.
	OffCPUThreshold time.Duration `yaml:"off_cpu_threshold"`
	Processes       Processes     `yaml:"processes"`
	Export          Export        `yaml:"export"`
	// Symbolization says where symbols come from.
	Symbolization Symbolization `yaml:"symbolization"`
	// Memory tunes the agent's Go runtime.
	Memory Memory `yaml:"memory"`
	// MetricsListen is the address of /metrics and /healthz; empty
	// disables the server.
	MetricsListen string `yaml:"metrics_listen"`
	// HostName is the host.name resource attribute; default os.Hostname.
	// In a pod without hostNetwork, set it to the node name.
	HostName string `yaml:"host_name"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `yaml:"log_level"`
}

// Processes selects what to profile. With neither PIDs nor Executables,
// every process is profiled.
type Processes struct {
	PIDs []int `yaml:"pids"`
	// Executables are executable base names (or, failing that, the
	// command name) to profile.
	Executables []string `yaml:"executables"`
}

// All reports whether every process is profiled.
func (p Processes) All() bool { return len(p.PIDs) == 0 && len(p.Executables) == 0 }

// Export configures where and how profiles are sent.
type Export struct {
	// Endpoints are collector OTLP/gRPC addresses, HOST:PORT. Every batch
	// goes to each of them.
	Endpoints []string `yaml:"endpoints"`
	// Headers are sent with every request (for example an authorization
	// token).
	Headers map[string]string `yaml:"headers"`
	TLS     TLS               `yaml:"tls"`
	// Compression is gzip or none.
	Compression string `yaml:"compression"`
	// ReportInterval is how often a profile is built and sent.
	ReportInterval time.Duration `yaml:"report_interval"`
	// Timeout bounds one export request.
	Timeout time.Duration `yaml:"timeout"`
	// QueueSize is how many batches wait per endpoint while the collector
	// is unreachable; beyond it the oldest are dropped and counted.
	QueueSize int `yaml:"queue_size"`
	// QueueMiB bounds the encoded size of the batches waiting per
	// endpoint as well, in MiB: reports grow with the processes and the
	// sampling rate, and the count alone would let an outage take
	// QueueSize times the largest. Beyond it the oldest are dropped and
	// counted as for QueueSize; the newest batch waits whatever its size.
	QueueMiB int   `yaml:"queue_mib"`
	Retry    Retry `yaml:"retry"`
	// ShutdownTimeout bounds the final flush on SIGTERM/SIGINT.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
}

// TLS configures the gRPC transport.
type TLS struct {
	// Insecure sends in plaintext.
	Insecure bool `yaml:"insecure"`
	// CAFile verifies the collector's certificate; default the system pool.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate (mutual TLS).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the name checked in the certificate.
	ServerName string `yaml:"server_name"`
}

// Retry shapes the exponential backoff of retryable export failures.
type Retry struct {
	InitialInterval time.Duration `yaml:"initial_interval"`
	MaxInterval     time.Duration `yaml:"max_interval"`
	// MaxElapsed is how long one batch is retried before it is dropped.
	MaxElapsed time.Duration `yaml:"max_elapsed"`
}

// Symbolization configures symbol lookup.
type Symbolization struct {
	// Mode is local (binaries and debug files on this host, offline),
	// none (addresses, build IDs and file offsets only, for a backend
	// that symbolizes) or full (local, then debuginfod). Empty means full
	// when debuginfod URLs are configured (here or DEBUGINFOD_URLS), else
	// local.
	Mode string `yaml:"mode"`
	// DebuginfodURLs are asked in order in full mode; empty means
	// DEBUGINFOD_URLS from the environment.
	DebuginfodURLs []string `yaml:"debuginfod_urls"`
	// DebugDirs are searched for separate debug files before
	// /usr/lib/debug.
	DebugDirs []string `yaml:"debug_dirs"`
	// DWARFCacheDir keeps compressed DWARF of debug files (libc6-dbg's)
	// decompressed on disk, up to 256 MiB, so that the agent holds it in
	// memory only while a report needs it and reads it back instead of
	// inflating it again. Empty keeps none. Default: spanprof-dwarf in
	// the temporary directory.
	DWARFCacheDir string `yaml:"dwarf_cache_dir"`
	// CacheMiB bounds the estimated memory of parsed binaries (symbol
	// tables, Go pclntabs, DWARF unit tables, and, for a quarter of it,
	// the unwind tables), least recently used evicted first
	// (--symbol-cache-mib). A Go binary's pclntab alone is megabytes: on a host
	// running many large Go programs a bound below their sum makes
	// reports parse them again (spanprof_symbolize_objects_evicted_total).
	// Binaries unused for symbolize.DefaultIdleTimeout go whatever the
	// bound. Default 32.
	CacheMiB int `yaml:"cache_mib"`
	// NoJVMPerfmap stops the agent asking running JVMs (HotSpot's attach
	// mechanism, the diagnostic command Compiler.perfmap) to write
	// /tmp/perf-PID.map; Java frames then stay addresses unless the JVM
	// writes the map itself.
	NoJVMPerfmap bool `yaml:"no_jvm_perfmap"`
}

// Memory tunes the Go runtime of the agent. GOGC and GOMEMLIMIT in the
// environment take precedence.
type Memory struct {
	// GCPercent is how far, in percent, the heap may grow over the live
	// data before a collection (GOGC). The agent's garbage comes in a
	// burst at each report, on a small live heap: 50 (Go's default is
	// 100) keeps the peak lower for little CPU. Default 50.
	GCPercent int `yaml:"gc_percent"`
	// LimitMiB is a soft limit on the Go runtime's memory (GOMEMLIMIT),
	// in MiB; 0 sets none. Below what the agent needs live, the garbage
	// collector runs continuously (up to half the CPU): set it with room
	// over the spanprof_go_memstats figures of your workload.
	LimitMiB int `yaml:"limit_mib"`
	// RingMiB is the size of the ring buffer the kernel writes samples
	// into, in MiB: a power of two, at least 2. The kernel maps its data
	// twice, so it counts double in the agent's RSS. The reader drains it
	// every 200 ms and whenever it holds 1 MiB; losses when it is full are
	// counted (spanprof_samples_lost_total{reason="ringbuf_full"}).
	// Default 4.
	RingMiB int `yaml:"ring_mib"`
}

// Default returns the configuration used where nothing is said.
func Default() Config {
	return Config{
		Frequency:       19,
		GoWaitFrequency: pipeline.DefaultGoWaitFrequency,
		OffCPUThreshold: pipeline.DefaultOffCPUThreshold,
		Export: Export{
			Endpoints:       []string{"localhost:4317"},
			Compression:     "gzip",
			ReportInterval:  10 * time.Second,
			Timeout:         10 * time.Second,
			QueueSize:       60,
			QueueMiB:        8,
			Retry:           Retry{InitialInterval: time.Second, MaxInterval: 30 * time.Second, MaxElapsed: 5 * time.Minute},
			ShutdownTimeout: 5 * time.Second,
		},
		Symbolization: Symbolization{DWARFCacheDir: filepath.Join(os.TempDir(), "spanprof-dwarf"), CacheMiB: 32},
		Memory:        Memory{GCPercent: 50, RingMiB: 4},
		MetricsListen: "127.0.0.1:9464",
		LogLevel:      "info",
	}
}

// LoadFile reads a YAML configuration over the defaults in cfg. Unknown
// keys are errors, so a typo does not silently fall back to a default.
func LoadFile(path string, cfg *Config) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	return parseYAML(data, cfg)
}

func parseYAML(data []byte, cfg *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	// An empty file is no document: io.EOF, and the defaults stand.
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("parse config: %s", oneLine(err.Error()))
	}
	return nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Validate checks cfg and returns the first problem as a user-facing error.
func (c *Config) Validate() error {
	// The ranges of what the kernel, the symbolizer and the runtime
	// take, as record's flags are checked.
	pc := c.pipeline(pipeline.Symbolization{}, nil)
	if err := pc.Validate(); err != nil {
		return pipeline.Rename(err, fieldNames)
	}
	for _, pid := range c.Processes.PIDs {
		if pid <= 0 {
			return fmt.Errorf("processes: not a process id: %d", pid)
		}
	}
	for _, e := range c.Processes.Executables {
		if e == "" || strings.Contains(e, "/") {
			return fmt.Errorf("processes: executable %q: want a base name", e)
		}
	}
	if err := c.Export.validate(); err != nil {
		return err
	}
	if _, err := pipeline.ResolveMode(c.Symbolization.Mode, false); err != nil {
		return fmt.Errorf("symbolization mode %q: want local, none or full", c.Symbolization.Mode)
	}
	for _, u := range c.Symbolization.DebuginfodURLs {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return fmt.Errorf("debuginfod URL %q: want http:// or https://", u)
		}
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			return fmt.Errorf("metrics listen address %q: want HOST:PORT", c.MetricsListen)
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log level %q: want debug, info, warn or error", c.LogLevel)
	}
	return nil
}

func (e *Export) validate() error {
	if len(e.Endpoints) == 0 {
		return errors.New("export: no endpoint")
	}
	seen := map[string]bool{}
	for _, ep := range e.Endpoints {
		if strings.Contains(ep, "://") {
			return fmt.Errorf("endpoint %q: want HOST:PORT without a scheme (plaintext is --insecure)", ep)
		}
		host, port, err := net.SplitHostPort(ep)
		if err != nil || host == "" || port == "" {
			return fmt.Errorf("endpoint %q: want HOST:PORT", ep)
		}
		if seen[ep] {
			return fmt.Errorf("endpoint %q listed twice", ep)
		}
		seen[ep] = true
	}
	for k := range e.Headers {
		if !validHeaderName(k) {
			return fmt.Errorf("header %q: want letters, digits, '-', '_' or '.'", k)
		}
	}
	switch e.Compression {
	case "gzip", "none":
	default:
		return fmt.Errorf("compression %q: want gzip or none", e.Compression)
	}
	if e.TLS.Insecure && (e.TLS.CAFile != "" || e.TLS.CertFile != "") {
		return errors.New("tls: insecure excludes ca_file and cert_file")
	}
	if (e.TLS.CertFile == "") != (e.TLS.KeyFile == "") {
		return errors.New("tls: cert_file and key_file go together")
	}
	for _, f := range []string{e.TLS.CAFile, e.TLS.CertFile, e.TLS.KeyFile} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("tls: %s: %w", f, errors.Unwrap(err))
		}
	}
	durations := []struct {
		name string
		d    time.Duration
	}{
		{"report interval", e.ReportInterval},
		{"export timeout", e.Timeout},
		{"retry initial interval", e.Retry.InitialInterval},
		{"retry max interval", e.Retry.MaxInterval},
		{"shutdown timeout", e.ShutdownTimeout},
	}
	for _, d := range durations {
		if d.d <= 0 {
			return fmt.Errorf("%s must be positive, got %v", d.name, d.d)
		}
	}
	if e.ReportInterval < 100*time.Millisecond {
		return fmt.Errorf("report interval %v is below the 100ms minimum", e.ReportInterval)
	}
	if e.Retry.MaxElapsed < 0 {
		return fmt.Errorf("retry max elapsed must not be negative, got %v", e.Retry.MaxElapsed)
	}
	if e.Retry.MaxInterval < e.Retry.InitialInterval {
		return fmt.Errorf("retry max interval %v is below the initial interval %v", e.Retry.MaxInterval, e.Retry.InitialInterval)
	}
	if e.QueueSize < 1 {
		return fmt.Errorf("queue size must be at least 1, got %d", e.QueueSize)
	}
	if e.QueueMiB < 1 || e.QueueMiB > 4096 {
		return fmt.Errorf("export queue_mib %d out of range 1..4096", e.QueueMiB)
	}
	return nil
}

// validHeaderName accepts what gRPC metadata keys allow (they are sent
// lowercased).
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for _, r := range k {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}
