package check

import (
	"fmt"
	"sort"
	"strings"
)

// Severity ranks a finding. Errors and warnings are violations and make
// `spanprof check` exit 1; notes only inform.
type Severity string

// Severities, named as in SARIF so the three outputs agree.
const (
	SevError   Severity = "error"
	SevWarning Severity = "warning"
	SevNote    Severity = "note"
)

// Rule is one stable check. Its ID is what --ignore and the JSON and SARIF
// outputs name, so an ID never changes meaning once released.
type Rule struct {
	ID       string
	Severity Severity
	// Summary says in one line what the rule looks for.
	Summary string
	// Fix is the default remedy shown under every finding of the rule.
	Fix string
}

// Rules lists every rule the checker knows, in the order docs/check.md
// describes them.
var Rules = []Rule{
	// Binaries and shared libraries.
	{"build-id-missing", SevError, "ELF file has no GNU build ID note",
		"link with -Wl,--build-id=sha1 (Go: go build -ldflags=-B=gobuildid)"},
	{"build-id-not-sha1", SevWarning, "GNU build ID is not 20 bytes (sha1)",
		"link with -Wl,--build-id=sha1"},
	{"frame-pointer-missing", SevError, "functions that call others set up no frame pointer",
		"compile with -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer"},
	{"leaf-frame-pointer", SevWarning, "leaf functions set up no frame pointer (GCC ignores -mno-omit-leaf-frame-pointer)",
		"build with clang, or accept leaf recovery by the unwinder (--ignore leaf-frame-pointer)"},
	{"frame-pointer-unverified", SevWarning, "frame pointers cannot be verified: no function symbols, and unwind tables that delimit too little of the code",
		"install the file's debug file under /usr/lib/debug (Debian: the PACKAGE-dbgsym package), or keep its .symtab or its unwind tables (.eh_frame), so its functions can be checked"},
	{"stripped-no-debuglink", SevWarning, "ELF file is stripped and has neither a .gnu_debuglink nor a build-ID debug file",
		"keep a debug file: objcopy --only-keep-debug BIN BIN.debug && objcopy --add-gnu-debuglink=BIN.debug BIN, or install it as /usr/lib/debug/.build-id/xx/rest.debug, or serve it by debuginfod"},
	{"thread-ctx-not-exported", SevError, "otel_thread_ctx_v1 is defined but not exported as a TLS symbol in .dynsym",
		"declare it `__thread void *otel_thread_ctx_v1` with default visibility and link with -Wl,--export-dynamic-symbol=otel_thread_ctx_v1"},
	{"binary-no-trace-context", SevNote, "binary publishes no trace context by itself",
		"link sdk/c (otel_thread_ctx_v1) or export spanprof_set_trace_context, or use sdk/go; a shared library loaded at run time may provide it"},
	{"elf-summary", SevNote, "what the checker found in an ELF file", ""},
	{"toolchain-functions", SevNote, "start-up code linked from crt files, listed apart and never a violation", ""},
	// Running processes.
	{"no-trace-context", SevError, "process publishes no trace context",
		"link sdk/c (otel_thread_ctx_v1), export spanprof_set_trace_context, use sdk/go in Go services, or publish an OTEL_CTX process context"},
	{"jvm-no-preserve-frame-pointer", SevError, "JVM runs without -XX:+PreserveFramePointer",
		"start the JVM with -XX:+PreserveFramePointer (or add it to JAVA_TOOL_OPTIONS)"},
	{"node-no-perf-flags", SevError, "Node.js runs without --perf-basic-prof and --interpreted-frames-native-stack",
		"start node with --perf-basic-prof --interpreted-frames-native-stack (or put them in NODE_OPTIONS)"},
	{"python-no-perf", SevError, "Python 3.12+ runs without the perf trampoline",
		"start python with -X perf (or set PYTHONPERFSUPPORT=1)"},
	{"python-no-perf-support", SevWarning, "Python before 3.12 has no perf trampoline: its functions cannot appear in native stacks",
		"run Python 3.12 or later with -X perf (or PYTHONPERFSUPPORT=1); before 3.12 only the interpreter's C frames (_PyEval_EvalFrameDefault) are seen"},
	{"mapping-unreadable", SevNote, "a mapped file of a process could not be checked", ""},
	// Build files.
	{"cflags-no-frame-pointer", SevError, "C/C++ flags lack -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer",
		"add -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer to CFLAGS and CXXFLAGS"},
	{"cflags-omit-frame-pointer", SevError, "flags ask for -fomit-frame-pointer",
		"remove -fomit-frame-pointer; use -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer"},
	{"ldflags-no-build-id", SevWarning, "link flags do not ask for a GNU build ID, or ask for none",
		"add -Wl,--build-id=sha1 to LDFLAGS (never --build-id=none)"},
	{"strip-removes-build-id", SevError, "a strip/objcopy command removes .note.gnu.build-id",
		"do not remove .note.gnu.build-id (strip --strip-all and ld -s keep it)"},
	{"strip-no-debug-file", SevWarning, "symbols are stripped and no debug file is kept",
		"keep a debug file: objcopy --only-keep-debug, then --add-gnu-debuglink, or publish it to debuginfod"},
	{"rustflags-no-frame-pointer", SevError, "Rust flags lack -C force-frame-pointers=yes",
		"set rustflags = [\"-C\", \"force-frame-pointers=yes\"] in .cargo/config.toml"},
	{"dockerfile-python-no-perf", SevWarning, "a Dockerfile's image runs Python 3.12 or later without the perf trampoline",
		"add ENV PYTHONPERFSUPPORT=1 to the final stage (or start python with -X perf in its CMD/ENTRYPOINT)"},
	{"go-ldflags-strip", SevNote, "Go build strips symbols (-s) or DWARF (-w)",
		"Go keeps frame pointers and .gopclntab keeps function names; drop -w to keep file:line of inlined frames"},
	// Collector configuration.
	{"collector-no-profiles-pipeline", SevError, "collector configuration has no profiles pipeline",
		"add service.pipelines.profiles with receivers: [otlp]"},
	{"collector-profiles-no-otlp", SevError, "profiles pipeline has no OTLP receiver",
		"add an otlp receiver (protocols: grpc) to the profiles pipeline"},
	{"collector-otlp-no-grpc", SevError, "the profiles pipeline's OTLP receiver speaks only http; the agent exports over gRPC",
		"add protocols: {grpc: {endpoint: 0.0.0.0:4317}} to the otlp receiver"},
	{"collector-undefined-component", SevError, "a profiles pipeline names a receiver, processor or exporter no section defines",
		"define it under the top-level receivers, processors, exporters or connectors, or remove it from the pipeline"},
	{"collector-feature-gate", SevNote, "profiles need a collector feature gate",
		"run the collector with --feature-gates=service.profilesSupport"},
	// eBPF sources.
	{"bpf-record-no-trace-context", SevError, "a sample record carries stacks but no trace_id/span_id",
		"add __u8 trace_id[16] and __u8 span_id[8] to the record and fill them at sample time"},
	{"bpf-printk-hot-path", SevError, "bpf_printk in a perf_event or sched_switch program",
		"remove bpf_printk from sampling programs; count events in a map instead"},
	{"bpf-ktime-no-realtime", SevWarning, "bpf_ktime_get_ns is used but no Go code converts to CLOCK_REALTIME",
		"convert kernel timestamps with a boot-time offset (CLOCK_REALTIME - CLOCK_MONOTONIC) before export"},
}

// ruleByID indexes Rules; built once because Rules never changes at run time.
var ruleByID = func() map[string]Rule {
	m := make(map[string]Rule, len(Rules))
	for _, r := range Rules {
		m[r.ID] = r
	}
	return m
}()

// parseIgnore turns "a,b" into a set, refusing unknown IDs so a typo does
// not silently keep a rule on.
func parseIgnore(list []string) (map[string]bool, error) {
	set := map[string]bool{}
	for _, item := range list {
		for _, id := range strings.Split(item, ",") {
			id = strings.TrimSpace(id)
			if id == "" {
				continue
			}
			if _, ok := ruleByID[id]; !ok {
				ids := make([]string, 0, len(Rules))
				for _, r := range Rules {
					ids = append(ids, r.ID)
				}
				sort.Strings(ids)
				return nil, fmt.Errorf("unknown rule %q (known: %s)", id, strings.Join(ids, ", "))
			}
			set[id] = true
		}
	}
	return set, nil
}

// Finding is one result. The JSON field names are a stable schema.
type Finding struct {
	Rule     string   `json:"rule"`
	Severity Severity `json:"severity"`
	// Target is what was checked: a file path or "pid N (name)".
	Target string `json:"target"`
	// Path is the file the finding is in (for a process, the mapped file
	// or the executable); Line is 1-based for text files, 0 otherwise.
	Path    string `json:"path,omitempty"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
	// Functions lists the offending functions for frame-pointer rules.
	Functions []string `json:"functions,omitempty"`
}

// newFinding fills severity and fix from the rule table.
func newFinding(rule, target, path string, line int, format string, args ...any) Finding {
	r, ok := ruleByID[rule]
	if !ok {
		panic("check: unknown rule " + rule)
	}
	return Finding{
		Rule:     rule,
		Severity: r.Severity,
		Target:   target,
		Path:     path,
		Line:     line,
		Message:  fmt.Sprintf(format, args...),
		Fix:      r.Fix,
	}
}

// violation reports whether f makes the check fail.
func (f Finding) violation() bool { return f.Severity == SevError || f.Severity == SevWarning }
