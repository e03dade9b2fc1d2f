package check

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/spanprof/spanprof/internal/cli"
)

// without drops findings of ignored rules.
func (r *Result) without(ignore map[string]bool) *Result {
	out := &Result{Targets: r.Targets, Excluded: r.Excluded}
	for _, f := range r.Findings {
		if !ignore[f.Rule] {
			out.Findings = append(out.Findings, f)
		}
	}
	return out
}

func (r *Result) count(s Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == s {
			n++
		}
	}
	return n
}

func (r *Result) violations() int { return r.count(SevError) + r.count(SevWarning) }

func (r *Result) write(w io.Writer, format string) error {
	switch format {
	case "json":
		return r.writeJSON(w)
	case "sarif":
		return r.writeSARIF(w)
	}
	return r.writeText(w)
}

// writeText groups findings by target, notes after violations, each with
// its fix.
func (r *Result) writeText(w io.Writer) error {
	var b strings.Builder
	byTarget := map[string][]Finding{}
	for _, f := range r.Findings {
		byTarget[f.Target] = append(byTarget[f.Target], f)
	}
	for _, t := range r.Targets {
		fs := byTarget[t]
		if fs == nil {
			fmt.Fprintf(&b, "%s: ok\n", t)
			continue
		}
		delete(byTarget, t)
		fmt.Fprintf(&b, "%s\n", t)
		for _, sev := range []Severity{SevError, SevWarning, SevNote} {
			for _, f := range fs {
				if f.Severity != sev {
					continue
				}
				where := ""
				if f.Line > 0 {
					where = fmt.Sprintf(" (%s:%d)", f.Path, f.Line)
				} else if f.Path != "" && f.Path != t {
					where = " (" + f.Path + ")"
				}
				fmt.Fprintf(&b, "  %-7s %s%s: %s\n", sev, f.Rule, where, f.Message)
				if f.Fix != "" && sev != SevNote {
					fmt.Fprintf(&b, "          fix: %s\n", f.Fix)
				}
			}
		}
	}
	count := func(n int, one, many string) string { return fmt.Sprintf("%d %s", n, plural(n, one, many)) }
	excluded := ""
	if len(r.Excluded) > 0 {
		excluded = fmt.Sprintf(" (%d excluded by --exclude)", len(r.Excluded))
	}
	fmt.Fprintf(&b, "%s, %s, %s in %s%s\n", count(r.count(SevError), "error", "errors"), count(r.count(SevWarning), "warning", "warnings"),
		count(r.count(SevNote), "note", "notes"), count(len(r.Targets), "target", "targets"), excluded)
	_, err := io.WriteString(w, b.String())
	return err
}

// JSONReport is the stable JSON schema (--format json). Version changes
// only when a field changes meaning or goes away.
type JSONReport struct {
	Version  int       `json:"version"`
	Targets  []string  `json:"targets"`
	Findings []Finding `json:"findings"`
	// Excluded lists what --exclude left out; omitted when nothing was.
	Excluded []string `json:"excluded,omitempty"`
	Summary  struct {
		Errors   int `json:"errors"`
		Warnings int `json:"warnings"`
		Notes    int `json:"notes"`
	} `json:"summary"`
}

func (r *Result) writeJSON(w io.Writer) error {
	rep := JSONReport{Version: 1, Targets: r.Targets, Findings: r.Findings, Excluded: r.Excluded}
	if rep.Targets == nil {
		rep.Targets = []string{}
	}
	if rep.Findings == nil {
		rep.Findings = []Finding{}
	}
	rep.Summary.Errors, rep.Summary.Warnings, rep.Summary.Notes = r.count(SevError), r.count(SevWarning), r.count(SevNote)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// SARIF 2.1.0, the subset code-scanning tools read.
type (
	sarifLog struct {
		Schema  string     `json:"$schema"`
		Version string     `json:"version"`
		Runs    []sarifRun `json:"runs"`
	}
	sarifRun struct {
		Tool    sarifTool     `json:"tool"`
		Results []sarifResult `json:"results"`
	}
	sarifTool struct {
		Driver sarifDriver `json:"driver"`
	}
	sarifDriver struct {
		Name           string      `json:"name"`
		Version        string      `json:"version"`
		InformationURI string      `json:"informationUri"`
		Rules          []sarifRule `json:"rules"`
	}
	sarifRule struct {
		ID                   string       `json:"id"`
		ShortDescription     sarifText    `json:"shortDescription"`
		Help                 *sarifText   `json:"help,omitempty"`
		DefaultConfiguration sarifDefault `json:"defaultConfiguration"`
	}
	sarifDefault struct {
		Level string `json:"level"`
	}
	sarifText struct {
		Text string `json:"text"`
	}
	sarifResult struct {
		RuleID    string          `json:"ruleId"`
		RuleIndex int             `json:"ruleIndex"`
		Level     string          `json:"level"`
		Message   sarifText       `json:"message"`
		Locations []sarifLocation `json:"locations,omitempty"`
	}
	sarifLocation struct {
		PhysicalLocation sarifPhysical `json:"physicalLocation"`
	}
	sarifPhysical struct {
		ArtifactLocation sarifArtifact `json:"artifactLocation"`
		Region           *sarifRegion  `json:"region,omitempty"`
	}
	sarifArtifact struct {
		URI string `json:"uri"`
	}
	sarifRegion struct {
		StartLine int `json:"startLine"`
	}
)

const sarifSchema = "https://json.schemastore.org/sarif-2.1.0.json"

// sarifURI keeps relative paths relative (resolved against the checkout
// by code-scanning tools) and turns absolute ones into file URIs.
func sarifURI(p string) string {
	if filepath.IsAbs(p) {
		return (&url.URL{Scheme: "file", Path: filepath.ToSlash(p)}).String()
	}
	return (&url.URL{Path: filepath.ToSlash(p)}).String()
}

func (r *Result) writeSARIF(w io.Writer) error {
	driver := sarifDriver{Name: "spanprof-check", Version: cli.Info().Version, InformationURI: "https://github.com/spanprof/spanprof/blob/main/docs/check.md"}
	index := map[string]int{}
	for i, rule := range Rules {
		index[rule.ID] = i
		sr := sarifRule{ID: rule.ID, ShortDescription: sarifText{rule.Summary}, DefaultConfiguration: sarifDefault{string(rule.Severity)}}
		if rule.Fix != "" {
			sr.Help = &sarifText{rule.Fix}
		}
		driver.Rules = append(driver.Rules, sr)
	}
	run := sarifRun{Tool: sarifTool{driver}, Results: []sarifResult{}}
	for _, f := range r.Findings {
		msg := f.Message
		if f.Target != f.Path {
			msg = f.Target + ": " + msg
		}
		if f.Fix != "" && f.Severity != SevNote {
			msg += " Fix: " + f.Fix
		}
		res := sarifResult{RuleID: f.Rule, RuleIndex: index[f.Rule], Level: string(f.Severity), Message: sarifText{msg}}
		if f.Path != "" {
			loc := sarifLocation{sarifPhysical{ArtifactLocation: sarifArtifact{sarifURI(f.Path)}}}
			if f.Line > 0 {
				loc.PhysicalLocation.Region = &sarifRegion{StartLine: f.Line}
			}
			res.Locations = []sarifLocation{loc}
		}
		run.Results = append(run.Results, res)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(sarifLog{Schema: sarifSchema, Version: "2.1.0", Runs: []sarifRun{run}})
}
