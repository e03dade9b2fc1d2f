package main

import "testing"

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"268435456", 256 << 20, true},
		{"256MiB", 256 << 20, true},
		{"2GiB", 2 << 30, true},
		{"512KiB", 512 << 10, true},
		{"100B", 100, true},
		{"0", 0, false},
		{"-5MiB", 0, false},
		{"256MB", 0, false},
		{"lots", 0, false},
	} {
		got, err := parseBytes(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok && formatBytes(got) == "" {
			t.Errorf("formatBytes(%d) is empty", got)
		}
	}
	if got := formatBytes(256 << 20); got != "256MiB" {
		t.Errorf("formatBytes(256 MiB) = %q", got)
	}
}
