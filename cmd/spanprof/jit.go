package main

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spanprof/spanprof/internal/pipeline"
)

// reportJIT puts the perf-map counters in the log and, when JVMs were
// asked for their maps, the count and cost of the requests on stderr.
func reportJIT(s pipeline.Stats, log *slog.Logger, stderr io.Writer) {
	st := s.PerfMaps
	log.Debug("perf maps", "reads", st.Reads, "named", st.Hits, "bad_lines", st.BadLines,
		"truncated", st.Truncated, "kept_from_rewrites", st.Kept, "read_after_exit", st.Exited, "malformed_jitdumps", st.BadDumps)
	if st.BadDumps > 0 {
		fmt.Fprintf(stderr, "spanprof: %d reads of jitdump files found them malformed; their JIT frames after the damage stay unnamed\n", st.BadDumps)
	}
	js := s.JVMs
	if js.Attaches+js.Failures+js.Exited == 0 {
		return
	}
	fmt.Fprintf(stderr, "spanprof: asked JVMs for their perf maps (Compiler.perfmap) %d times, %d failed, %d found the JVM gone, %d more rate-limited; %.1f ms in all, %.1f ms the longest\n",
		js.Attaches+js.Failures+js.Exited, js.Failures, js.Exited, js.Skipped, ms(js.Time), ms(js.Max))
}

func ms(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond)
}
