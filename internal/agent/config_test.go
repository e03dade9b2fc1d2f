package agent

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func envMap(m map[string]string) LookupEnv {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const fullConfig = `
frequency: 49
off_cpu: true
off_cpu_threshold: 5ms
processes:
  pids: [1, 2]
  executables: [nginx, java]
export:
  endpoints: [collector-a:4317, collector-b:4317]
  headers:
    authorization: Bearer from-file
  tls:
    insecure: true
  compression: none
  report_interval: 30s
  timeout: 3s
  queue_size: 7
  queue_mib: 3
  retry:
    initial_interval: 2s
    max_interval: 20s
    max_elapsed: 1m
  shutdown_timeout: 9s
symbolization:
  mode: local
  debuginfod_urls: [https://debuginfod.example.org]
  debug_dirs: [/srv/debug]
  dwarf_cache_dir: /var/cache/spanprof
  cache_mib: 48
  no_jvm_perfmap: true
memory:
  gc_percent: 80
  limit_mib: 96
go_wait_frequency: 7
metrics_listen: 0.0.0.0:9999
host_name: node-1
log_level: debug
`

func TestParseArgsFile(t *testing.T) {
	path := writeFile(t, "agent.yaml", fullConfig)
	got, err := ParseArgs([]string{"--config", path}, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Frequency:       49,
		GoWaitFrequency: 7,
		OffCPU:          true,
		OffCPUThreshold: 5 * time.Millisecond,
		Processes:       Processes{PIDs: []int{1, 2}, Executables: []string{"nginx", "java"}},
		Export: Export{
			Endpoints:       []string{"collector-a:4317", "collector-b:4317"},
			Headers:         map[string]string{"authorization": "Bearer from-file"},
			TLS:             TLS{Insecure: true},
			Compression:     "none",
			ReportInterval:  30 * time.Second,
			Timeout:         3 * time.Second,
			QueueSize:       7,
			QueueMiB:        3,
			Retry:           Retry{InitialInterval: 2 * time.Second, MaxInterval: 20 * time.Second, MaxElapsed: time.Minute},
			ShutdownTimeout: 9 * time.Second,
		},
		Symbolization: Symbolization{Mode: "local", DebuginfodURLs: []string{"https://debuginfod.example.org"}, DebugDirs: []string{"/srv/debug"},
			DWARFCacheDir: "/var/cache/spanprof", CacheMiB: 48, NoJVMPerfmap: true},
		Memory:        Memory{GCPercent: 80, LimitMiB: 96, RingMiB: 4},
		MetricsListen: "0.0.0.0:9999",
		HostName:      "node-1",
		LogLevel:      "debug",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("config from file:\n got %+v\nwant %+v", got, want)
	}
}

func TestParseArgsPrecedence(t *testing.T) {
	path := writeFile(t, "agent.yaml", fullConfig)
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, c Config)
	}{
		{"defaults", nil, nil, func(t *testing.T, c Config) {
			if !reflect.DeepEqual(c, Default()) {
				t.Errorf("got %+v, want the defaults", c)
			}
			if !c.Processes.All() {
				t.Error("default does not profile all processes")
			}
		}},
		{"file via SPANPROF_CONFIG", nil, map[string]string{"SPANPROF_CONFIG": path}, func(t *testing.T, c Config) {
			if c.Frequency != 49 {
				t.Errorf("frequency %d, want the file's 49", c.Frequency)
			}
		}},
		{"env over file", []string{"--config", path}, map[string]string{
			"SPANPROF_FREQUENCY": "29", "SPANPROF_ENDPOINT": "env:4317", "SPANPROF_INSECURE": "false",
			"SPANPROF_REPORT_INTERVAL": "15s", "SPANPROF_PIDS": "5,6", "SPANPROF_HEADERS": "authorization=Bearer env,x-org=1",
			"SPANPROF_METRICS_LISTEN": "127.0.0.1:1", "SPANPROF_QUEUE_SIZE": "3",
		}, func(t *testing.T, c Config) {
			if c.Frequency != 29 || c.Export.Endpoints[0] != "env:4317" || len(c.Export.Endpoints) != 1 ||
				c.Export.TLS.Insecure || c.Export.ReportInterval != 15*time.Second ||
				!reflect.DeepEqual(c.Processes.PIDs, []int{5, 6}) || c.MetricsListen != "127.0.0.1:1" || c.Export.QueueSize != 3 {
				t.Errorf("env did not override the file: %+v", c)
			}
			if want := map[string]string{"authorization": "Bearer env", "x-org": "1"}; !reflect.DeepEqual(c.Export.Headers, want) {
				t.Errorf("headers %v, want %v", c.Export.Headers, want)
			}
			if c.Export.Compression != "none" {
				t.Errorf("compression %q: the file's value was lost", c.Export.Compression)
			}
		}},
		{"flag over env over file", []string{"--config", path, "--frequency", "99", "--endpoint", "flag:4317",
			"--endpoint", "flag2:4317", "--insecure", "--report-interval", "1s", "--pid", "9", "--metrics-listen", "off",
			"--header", "authorization=Bearer flag"},
			map[string]string{"SPANPROF_FREQUENCY": "29", "SPANPROF_ENDPOINT": "env:4317", "SPANPROF_INSECURE": "false",
				"SPANPROF_PIDS": "5"},
			func(t *testing.T, c Config) {
				if c.Frequency != 99 || !reflect.DeepEqual(c.Export.Endpoints, []string{"flag:4317", "flag2:4317"}) ||
					!c.Export.TLS.Insecure || c.Export.ReportInterval != time.Second ||
					!reflect.DeepEqual(c.Processes.PIDs, []int{9}) || c.MetricsListen != "" {
					t.Errorf("flags did not override: %+v", c)
				}
				if c.Export.Headers["authorization"] != "Bearer flag" || len(c.Export.Headers) != 1 {
					t.Errorf("headers %v", c.Export.Headers)
				}
			}},
		{"off-cpu from env and flag", []string{"--off-cpu-threshold", "1ms"}, map[string]string{"SPANPROF_OFF_CPU": "1", "SPANPROF_OFF_CPU_THRESHOLD": "3ms"},
			func(t *testing.T, c Config) {
				if !c.OffCPU || c.OffCPUThreshold != time.Millisecond {
					t.Errorf("off_cpu %v threshold %v, want true and the flag's 1ms", c.OffCPU, c.OffCPUThreshold)
				}
			}},
		{"no-jvm-perfmap from env and flag", []string{"--no-jvm-perfmap=false"}, map[string]string{"SPANPROF_NO_JVM_PERFMAP": "true"},
			func(t *testing.T, c Config) {
				if c.Symbolization.NoJVMPerfmap {
					t.Error("--no-jvm-perfmap=false did not win over SPANPROF_NO_JVM_PERFMAP=true")
				}
			}},
		{"symbol-cache-mib", []string{"--symbol-cache-mib", "48"}, nil,
			func(t *testing.T, c Config) {
				if c.Symbolization.CacheMiB != 48 {
					t.Errorf("cache_mib %d, want the flag's 48", c.Symbolization.CacheMiB)
				}
				pc, err := c.Pipeline(nil)
				if err != nil {
					t.Fatal(err)
				}
				b := pc.Budget
				if b.SymbolBytes()+b.UnwindBytes() != 48<<20 || b.UnwindBytes() != 12<<20 {
					t.Errorf("budget split %d + %d, want 36 MiB + 12 MiB", b.SymbolBytes(), b.UnwindBytes())
				}
			}},
		{"no-jvm-perfmap from env", nil, map[string]string{"SPANPROF_NO_JVM_PERFMAP": "1"},
			func(t *testing.T, c Config) {
				if !c.Symbolization.NoJVMPerfmap {
					t.Error("SPANPROF_NO_JVM_PERFMAP=1 did not turn the JVM requests off")
				}
			}},
		{"flag false over env true", []string{"--insecure=false"}, map[string]string{"SPANPROF_INSECURE": "true"},
			func(t *testing.T, c Config) {
				if c.Export.TLS.Insecure {
					t.Error("--insecure=false did not win over SPANPROF_INSECURE=true")
				}
			}},
		{"empty file keeps defaults", []string{"--config", writeFile(t, "empty.yaml", "")}, nil, func(t *testing.T, c Config) {
			if !reflect.DeepEqual(c, Default()) {
				t.Errorf("got %+v, want the defaults", c)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseArgs(tt.args, envMap(tt.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestParseArgsErrors(t *testing.T) {
	ca := writeFile(t, "ca.pem", "x")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		file string
		want string
	}{
		{"off-cpu threshold", []string{"--off-cpu", "--off-cpu-threshold", "0s"}, nil, "", "off-CPU threshold 0s out of range"},
		{"off-cpu threshold from env", nil, map[string]string{"SPANPROF_OFF_CPU_THRESHOLD": "2h"}, "", "off-CPU threshold 2h0m0s out of range"},
		{"frequency", []string{"--frequency", "0"}, nil, "", "frequency 0 out of range"},
		{"endpoint with scheme", []string{"--endpoint", "http://c:4317"}, nil, "", "without a scheme"},
		{"endpoint without port", []string{"--endpoint", "collector"}, nil, "", "want HOST:PORT"},
		{"pid", []string{"--pid", "x"}, nil, "", `not a process id: "x"`},
		{"env pid", nil, map[string]string{"SPANPROF_PIDS": "-3"}, "", "SPANPROF_PIDS"},
		{"env duration", nil, map[string]string{"SPANPROF_REPORT_INTERVAL": "10"}, "", "SPANPROF_REPORT_INTERVAL: not a duration"},
		{"env bool", nil, map[string]string{"SPANPROF_INSECURE": "maybe"}, "", "SPANPROF_INSECURE: not a boolean"},
		{"report interval", []string{"--report-interval", "10ms"}, nil, "", "below the 100ms minimum"},
		{"symbolization", nil, map[string]string{"SPANPROF_SYMBOLIZATION": "debuginfod"}, "", `want local, none or full`},
		{"compression", nil, map[string]string{"SPANPROF_COMPRESSION": "zstd"}, "", "want gzip or none"},
		{"header", []string{"--header", "novalue"}, nil, "", "want KEY=VALUE"},
		{"header name", []string{"--header", "a b=c"}, nil, "", "header \"a b\""},
		{"metrics listen", []string{"--metrics-listen", "9464"}, nil, "", "metrics listen address"},
		{"insecure with CA", []string{"--insecure", "--ca-file", ca}, nil, "", "insecure excludes ca_file"},
		{"missing CA", []string{"--ca-file", "/nonexistent/ca.pem"}, nil, "", "no such file"},
		{"executable path", []string{"--executable", "/usr/bin/x"}, nil, "", "want a base name"},
		{"unknown key", nil, nil, "frequncy: 9\n", "field frequncy not found"},
		{"bad yaml", nil, nil, "export: [\n", "parse config"},
		{"wrong type", nil, nil, "frequency: fast\n", "parse config"},
		{"queue size", nil, nil, "export:\n  queue_size: 0\n", "queue size must be at least 1"},
		{"queue bytes", nil, nil, "export:\n  queue_mib: 0\n", "queue_mib 0 out of range 1..4096"},
		{"queue bytes from env", nil, map[string]string{"SPANPROF_QUEUE_MIB": "5000"}, "", "queue_mib 5000 out of range 1..4096"},
		{"symbol cache", nil, nil, "symbolization:\n  cache_mib: 0\n", "cache_mib 0: want at least 1"},
		{"gc percent", nil, nil, "memory:\n  gc_percent: 5\n", "gc_percent 5 out of range"},
		{"memory limit", nil, nil, "memory:\n  limit_mib: -1\n", "limit_mib -1 is negative"},
		{"ring size", nil, nil, "memory:\n  ring_mib: 3\n", "ring_mib 3: want a power of two from 2 to 1024"},
		{"missing file", []string{"--config", "/nonexistent.yaml"}, nil, "", "read config"},
		{"argument", []string{"extra"}, nil, "", `unexpected argument "extra"`},
		{"debuginfod url", nil, map[string]string{"SPANPROF_DEBUGINFOD_URLS": "debuginfod.example.org"}, "", "want http:// or https://"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.file != "" {
				args = append([]string{"--config", writeFile(t, "c.yaml", tt.file)}, args...)
			}
			_, err := ParseArgs(args, envMap(tt.env), io.Discard)
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestParseArgsHelp(t *testing.T) {
	var out strings.Builder
	_, err := ParseArgs([]string{"-h"}, envMap(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	for _, f := range []string{"-config", "-endpoint", "-insecure", "-report-interval", "-pid", "-frequency", "-off-cpu", "-metrics-listen"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("usage lacks %s", f)
		}
	}
}
