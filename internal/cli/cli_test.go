package cli

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

func TestSuggest(t *testing.T) {
	commands := []string{"record", "agent", "check", "serve", "help", "version"}
	tests := []struct{ word, want string }{
		{"recrod", "record"},
		{"reocrd", "record"},
		{"chekc", "check"},
		{"serv", "serve"},
		{"agnet", "agent"},
		{"frobnicate", ""},
		{"x", ""},
	}
	for _, tt := range tests {
		if got := Suggest(tt.word, commands); got != tt.want {
			t.Errorf("Suggest(%q) = %q, want %q", tt.word, got, tt.want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{"2s", 2 * time.Second, ""},
		{"1m30s", 90 * time.Second, ""},
		{"2", 0, "missing unit (2s?)"},
		{"0.5", 0, "missing unit (0.5s?)"},
		{"soon", 0, "not a duration"},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseDuration(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	newFS := func() *flag.FlagSet {
		fs := flag.NewFlagSet("spanprof record", flag.ContinueOnError)
		Duration(fs, "duration", time.Second, "how long")
		fs.Int("frequency", 99, "rate")
		return fs
	}
	var out bytes.Buffer
	err := Parse(newFS(), []string{"-durtion", "1s"}, &out)
	var fe *FlagError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want a FlagError", err)
	}
	want := "flag provided but not defined: -durtion (did you mean --duration?)\nRun 'spanprof record -h' for its flags."
	if err.Error() != want || out.Len() != 0 {
		t.Fatalf("got %q (stdout %q), want %q", err, out.String(), want)
	}
	err = Parse(newFS(), []string{"--duration", "2"}, &out)
	if err == nil || !strings.Contains(err.Error(), "missing unit (2s?)") {
		t.Fatalf("--duration 2: %v", err)
	}
	err = Parse(newFS(), []string{"-h"}, &out)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "-frequency") {
		t.Fatalf("-h: %v, stdout %q", err, out.String())
	}
}
