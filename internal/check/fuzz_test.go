package check

import (
	"bytes"
	"strings"
	"testing"
)

// The readers take files from anywhere on the system, so they must never
// panic, and what they return must stay self-consistent.

func FuzzAnalyzeELF(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := analyzeELF(bytes.NewReader(data), elfOptions{DebugRoot: "/nonexistent"}, "")
		if err != nil {
			return
		}
		fp := info.FP
		if fp.WithFrame > fp.Checked || len(fp.Missing)+len(fp.Leaf) != fp.Checked-fp.WithFrame {
			t.Fatalf("inconsistent counts: %+v", fp)
		}
		for _, fd := range elfFindings(info, "t", "t", true) {
			if _, ok := ruleByID[fd.Rule]; !ok || fd.Message == "" {
				t.Fatalf("bad finding %+v", fd)
			}
		}
	})
}

func FuzzCollector(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		fs, err := checkCollector("c.yaml", data)
		if err != nil {
			return
		}
		gates := 0
		for _, fd := range fs {
			if !strings.HasPrefix(fd.Rule, "collector-") || fd.Line < 0 {
				t.Fatalf("bad finding %+v", fd)
			}
			if fd.Rule == "collector-feature-gate" {
				gates++
			}
		}
		// Kubernetes manifests and multi-document files hold any number of
		// collector configurations; a plain file is exactly one.
		plain := !bytes.Contains(data, []byte("apiVersion")) && !bytes.Contains(data, []byte("---")) &&
			!bytes.Contains(data, []byte("..."))
		if plain && gates != 1 {
			t.Fatalf("%d feature-gate notes, want 1", gates)
		}
	})
}

func FuzzBuildFile(f *testing.F) {
	kinds := []fileKind{kindMake, kindDocker, kindCMake, kindMeson, kindCargo, kindBazel}
	f.Fuzz(func(t *testing.T, text string) {
		lines := strings.Count(text, "\n") + 1
		for _, k := range kinds {
			for _, fd := range checkBuildFile(k, "f", text) {
				if fd.Line < 1 || fd.Line > lines {
					t.Fatalf("%s: %s on line %d of %d", k, fd.Rule, fd.Line, lines)
				}
			}
		}
	})
}

func FuzzBPFSource(f *testing.F) {
	var l bpfLinter
	f.Fuzz(func(t *testing.T, src string) {
		lines := strings.Count(src, "\n") + 1
		for _, fd := range l.checkBPFSource("/nonexistent/x.bpf.c", src) {
			if fd.Line < 1 || fd.Line > lines {
				t.Fatalf("%s on line %d of %d", fd.Rule, fd.Line, lines)
			}
		}
	})
}
