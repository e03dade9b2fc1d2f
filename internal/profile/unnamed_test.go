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
