package sampler

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/spanprof/spanprof/bpf"
	"github.com/spanprof/spanprof/internal/testutil"
)

// TestOTelMap pins a traces_ctx_v1 map the way the OTel eBPF
// Instrumentation makes it (an LRU hash keyed by pid_tgid, value
// {trace_id[16], span_id[8]}, 1<<14 entries, pinned by name), and maps of
// other sizes, fills the entry of a busy child and checks that the
// programs read the child's span from it; a map of another layout is left
// alone and the sampler still loads.
func TestOTelMap(t *testing.T) {
	testutil.RequireRoot(t)
	if err := ensureBPFFS(PinDir); err != nil {
		t.Skipf("no BPF file system to pin in: %v", err)
	}
	tests := []struct {
		name string
		spec ebpf.MapSpec
		read bool
	}{
		{"as OBI pins it", ebpf.MapSpec{Type: ebpf.LRUHash, KeySize: 8, ValueSize: 24, MaxEntries: 1 << 14}, true},
		{"other size and a longer value", ebpf.MapSpec{Type: ebpf.Hash, KeySize: 8, ValueSize: 40, MaxEntries: 1000}, true},
		{"another layout", ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 24, MaxEntries: 64}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("/sys/fs/bpf", "spanprof-test-")
			if err != nil {
				t.Skipf("cannot make a directory in /sys/fs/bpf: %v", err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			pin := filepath.Join(dir, "traces_ctx_v1")
			spec := tt.spec
			spec.Name = "traces_ctx_v1"
			m, err := ebpf.NewMap(&spec)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if err := m.Pin(pin); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("sh", "-c", "while :; do :; done")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			pid := uint64(cmd.Process.Pid)
			var trace [16]byte
			var span [8]byte
			for i := range trace {
				trace[i] = byte(0x40 + i)
			}
			for i := range span {
				span[i] = byte(0x90 + i)
			}
			val := make([]byte, spec.ValueSize)
			copy(val, trace[:])
			copy(val[16:], span[:])
			if spec.KeySize == 8 {
				key := make([]byte, 8)
				binary.NativeEndian.PutUint64(key, pid<<32|pid) // pid_tgid of the main thread
				if err := m.Put(key, val); err != nil {
					t.Fatal(err)
				}
			}

			s := startSampler(t, Options{Frequency: 999, PIDs: []int{cmd.Process.Pid}, OTelMapPin: pin})
			var n, fromMap, right int
			deadline := time.After(time.Second)
		loop:
			for {
				select {
				case e := <-s.Events():
					r := e.Sample
					if r == nil {
						continue
					}
					n++
					if r.CtxSource == bpf.SamplerCtxSourceCTX_OTEL_MAP {
						fromMap++
						if r.Link.TraceID == trace && r.Link.SpanID == span {
							right++
						}
					}
				case <-deadline:
					break loop
				}
			}
			t.Logf("%s: %d samples, %d from the map, %d with its ids", tt.name, n, fromMap, right)
			if n < 100 {
				t.Skipf("only %d samples of the child: the machine is too busy to judge", n)
			}
			if !tt.read {
				if fromMap != 0 {
					t.Errorf("%d samples took ids from a map of another layout", fromMap)
				}
				return
			}
			if right != n || fromMap != n {
				t.Errorf("%d of %d samples carry the map's ids (%d from the map), want all", right, n, fromMap)
			}
		})
	}
}
