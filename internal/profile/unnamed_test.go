package profile

import "testing"

func TestCountUnnamed(t *testing.T) {
	bin := &Mapping{Path: "/usr/bin/app", BuildID: "ab"}
	lib := &Mapping{Path: "/usr/lib/libx.so"}
	anon := &Mapping{Path: "[anon:jit]"}
	kern := &Mapping{Kernel: true}
	p := &Profile{Samples: []Sample{
		{Frames: []Frame{{Address: 1, Mapping: bin}, {Address: 2, Mapping: bin}, {Function: "main", Mapping: bin}}},
		{Frames: []Frame{{Address: 3, Mapping: lib}}},
		{Frames: []Frame{{Function: "f", Mapping: bin}}},             // named
		{Frames: []Frame{{Address: 4, Mapping: anon}}},               // no file to name it from
		{Frames: []Frame{{Address: 5, Mapping: kern}, {Address: 6}}}, // kernel, no mapping
	}}
	u := CountUnnamed(p)
	if u.Samples != 2 || len(u.Objects) != 2 || u.Objects["/usr/bin/app"] != 2 || u.Objects["/usr/lib/libx.so"] != 1 {
		t.Errorf("got %+v", u)
	}
	if got, want := u.String(), "app, libx.so"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// TestCountUnnamedByStart counts frames named by their function's start
// as lacking symbols, once per function, and the rest once per address.
func TestCountUnnamedByStart(t *testing.T) {
	bin := &Mapping{Path: "/usr/bin/gzip", Start: 0x1000, Offset: 0}
	p := &Profile{Samples: []Sample{
		{Frames: []Frame{{Address: 0x4308, Function: "gzip+0x4290", NoSymbol: true, Mapping: bin}, {Address: 0x5000, Mapping: bin}}},
		{Frames: []Frame{{Address: 0x4313, Function: "gzip+0x4290", NoSymbol: true, Mapping: bin}}},
		{Frames: []Frame{{Address: 0x6000, Function: "gzip+0x5ff0", NoSymbol: true, Mapping: bin}, {Address: 0x5000, Mapping: bin}}},
		{Frames: []Frame{{Address: 0x7000, Function: "main", Mapping: bin}}},
	}}
	u := CountUnnamed(p)
	if u.Samples != 3 || u.Functions != 2 || u.Addresses != 1 || u.Objects["/usr/bin/gzip"] != 5 {
		t.Errorf("got %+v; want 3 samples, 2 functions, 1 address, 5 frames", u)
	}
	agg := Aggregate{Frames: []Frame{p.Samples[0].Frames[0], p.Samples[1].Frames[0], p.Samples[0].Frames[1], p.Samples[3].Frames[0]}}
	if a := agg.CountUnnamedFrames(); a.Functions != 1 || a.Addresses != 1 || a.Objects["/usr/bin/gzip"] != 3 {
		t.Errorf("aggregate: got %+v; want 1 function, 1 address, 3 frames", a)
	}
}
