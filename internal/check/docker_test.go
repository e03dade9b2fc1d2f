package check

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDockerPython: the image a Dockerfile builds runs CPython 3.12 or
// later with neither PYTHONPERFSUPPORT=1 nor -X perf: a warning on the
// last FROM line.
func TestDockerPython(t *testing.T) {
	tests := []struct {
		name, file string
		line       int // 0: no finding
	}{
		{"3.12 image", "FROM python:3.12\nCMD [\"python\", \"app.py\"]\n", 1},
		{"3.13 slim, digest", "FROM python:3.13-slim@sha256:abc\n", 1},
		{"latest", "FROM docker.io/library/python\n", 1},
		{"major only", "FROM python:3-alpine\n", 1},
		{"3.11: no trampoline to turn on", "FROM python:3.11\n", 0},
		{"2.7", "FROM python:2.7\n", 0},
		{"not python", "FROM debian:bookworm\nRUN apt-get install -y python3\n", 0},
		{"pypy", "FROM pypy:3.10\n", 0},
		{"ENV", "FROM python:3.12\nENV PYTHONPERFSUPPORT=1\n", 0},
		{"ENV legacy form", "FROM python:3.12\nENV PYTHONPERFSUPPORT 1\n", 0},
		{"ENV 0", "FROM python:3.12\nENV PYTHONPERFSUPPORT=0\n", 1},
		{"-X perf, exec form", "FROM python:3.12\nCMD [\"python\", \"-X\", \"perf\", \"app.py\"]\n", 0},
		{"-Xperf_jit, shell form", "FROM python:3.12\nENTRYPOINT python3 -Xperf_jit app.py\n", 0},
		{"sh -c in exec form", "FROM python:3.12\nCMD [\"sh\", \"-c\", \"python -X perf app.py\"]\n", 0},
		{"RUN only is build time", "FROM python:3.12\nRUN PYTHONPERFSUPPORT=1 python -X perf setup.py\n", 1},
		{"ARG version", "ARG PY=3.12\nFROM python:${PY}-slim\n", 2},
		{"ARG default old", "ARG PY=3.10\nFROM python:${PY}\n", 0},
		{"python only in the build stage", "FROM python:3.12 AS build\nRUN pip wheel .\nFROM debian:bookworm\n", 0},
		{"stage inherits ENV", "FROM python:3.12 AS base\nENV PYTHONPERFSUPPORT=1\nFROM base\nCMD [\"python\", \"app.py\"]\n", 0},
		{"stage inherits image", "FROM python:3.12 AS base\nRUN true\nFROM base AS app\nRUN true\n", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := checkBuildFile(kindDocker, "Dockerfile", tt.file)
			var got []Finding
			for _, f := range fs {
				if f.Rule == "dockerfile-python-no-perf" {
					got = append(got, f)
				}
			}
			switch {
			case tt.line == 0 && len(got) > 0:
				t.Errorf("unexpected finding: %+v", got)
			case tt.line > 0 && (len(got) != 1 || got[0].Line != tt.line || got[0].Severity != SevWarning):
				t.Errorf("want one warning on line %d, got %+v", tt.line, got)
			}
		})
	}
}

// TestDockerPythonOutputs: the rule reaches the text, JSON and SARIF
// outputs as every rule does, and fails the check.
func TestDockerPythonOutputs(t *testing.T) {
	bad := filepath.Join(fixtures, "build/python-bad.Dockerfile")
	good := filepath.Join(fixtures, "build/python-good.Dockerfile")
	var out, errb bytes.Buffer
	if code := Main([]string{good}, &out, &errb); code != 0 {
		t.Errorf("good Dockerfile: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := Main([]string{bad}, &out, &errb); code != 1 || !strings.Contains(out.String(), "python-bad.Dockerfile:6): the image runs python:3.12-slim (Python 3.12 or later)") {
		t.Errorf("text: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	if code := Main([]string{"--format", "json", bad}, &out, &errb); code != 1 {
		t.Errorf("json: exit %d", code)
	}
	var doc struct {
		Findings []Finding `json:"findings"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("json: %v\n%s", err, out.String())
	}
	i := slices.IndexFunc(doc.Findings, func(f Finding) bool { return f.Rule == "dockerfile-python-no-perf" })
	if i < 0 || doc.Findings[i].Line != 6 || doc.Findings[i].Fix == "" {
		t.Errorf("json findings: %+v", doc.Findings)
	}
	out.Reset()
	if code := Main([]string{"--format", "sarif", bad}, &out, &errb); code != 1 {
		t.Errorf("sarif: exit %d", code)
	}
	var log struct {
		Runs []struct {
			Results []struct {
				RuleID    string `json:"ruleId"`
				Level     string `json:"level"`
				Locations []struct {
					PhysicalLocation struct {
						Region struct {
							StartLine int `json:"startLine"`
						} `json:"region"`
					} `json:"physicalLocation"`
				} `json:"locations"`
			} `json:"results"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(out.Bytes(), &log); err != nil || len(log.Runs) != 1 {
		t.Fatalf("sarif: %v\n%s", err, out.String())
	}
	found := false
	for _, r := range log.Runs[0].Results {
		if r.RuleID == "dockerfile-python-no-perf" && r.Level == "warning" && len(r.Locations) == 1 && r.Locations[0].PhysicalLocation.Region.StartLine == 6 {
			found = true
		}
	}
	if !found {
		t.Errorf("sarif has no warning dockerfile-python-no-perf on line 6:\n%s", out.String())
	}
	if _, err := os.Stat(bad); err != nil {
		t.Fatal(err)
	}
}
