package collect

import (
	"encoding/binary"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/sampler"
)

//go:noinline
func leafMarker(n int) int { return n * 3 }

//go:noinline
func callerMarker(n int) int { return leafMarker(n) + 1 }

//go:noinline
func outerMarker(n int) int { return callerMarker(n) + 2 }

// TestAddRecoversLeafCaller feeds records of this process sampled at the
// first instruction of a Go function, where the CFA is RSP+8 and the
// frame-pointer walk has skipped the caller: the collector must put the
// return address from the stack copy back, on the first record (tables
// read) and on repeats of the same ip (rule remembered), and leave a
// record alone when the stack copy does not reach the return address.
func TestAddRecoversLeafCaller(t *testing.T) {
	leaf := uint64(reflect.ValueOf(leafMarker).Pointer())
	caller := uint64(reflect.ValueOf(callerMarker).Pointer()) + 8 // a return address inside callerMarker
	outer := uint64(reflect.ValueOf(outerMarker).Pointer()) + 8
	top := make([]byte, 64)
	binary.LittleEndian.PutUint64(top, caller)

	c := New(Options{Frequency: 99})
	pid := uint32(os.Getpid())
	rec := func(stackTop []byte) *sampler.Record {
		return &sampler.Record{
			Kind: profile.OnCPU, PID: pid, TID: pid, Comm: "test", Time: time.Now(), Value: 1,
			UserIP: leaf, UserSP: 0x7ffd0000, StackTop: stackTop,
			// The walk went from the leaf straight to its caller's caller.
			UserStack: []uint64{leaf, outer},
		}
	}
	c.Add(rec(top))
	c.Add(rec(top))
	c.Add(rec(top[:4])) // the copy ends before the return address
	if st := c.Stats(); st.Samples != 3 || st.LeafRecovered != 2 {
		t.Fatalf("stats %+v, want 3 samples, 2 recovered", st)
	}
	prof := c.Build(time.Now())
	for i, s := range prof.Samples {
		var names []string
		for _, f := range s.Frames {
			names = append(names, f.Function)
		}
		got := strings.Join(names, " ")
		want := "leafMarker callerMarker outerMarker"
		if i == 2 {
			want = "leafMarker outerMarker"
		}
		if !strings.Contains(shortNames(got), want) {
			t.Errorf("sample %d: frames %q, want %q", i, got, want)
		}
	}
}

// shortNames drops package paths from Go function names.
func shortNames(s string) string {
	var out []string
	for _, f := range strings.Fields(s) {
		out = append(out, f[strings.LastIndexByte(f, '.')+1:])
	}
	return strings.Join(out, " ")
}
