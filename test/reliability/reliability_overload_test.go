package reliability

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/spanprof/spanprof/bpf"
	"github.com/spanprof/spanprof/internal/testutil"
)

// TestReliabilityOverloadLossesCountedExactly samples at 10 kHz on every
// CPU and stops the reader (SIGSTOP) long enough for the 8 MiB ring to
// overflow. The ring-full count spanprof writes must equal the kernel
// program's counter, and every sample the kernel submitted must be in the
// output or counted as lost in user space: nothing lost silently.
func TestReliabilityOverloadLossesCountedExactly(t *testing.T) {
	testutil.RequireRoot(t)
	out := filepath.Join(t.TempDir(), "overload.pb.gz")
	rec := startSpanprof(t, "recording", "record", "--all", "--frequency", "10000",
		"--duration", "6s", "--output", out)
	pid := rec.cmd.Process.Pid
	counters, err := countersMap(pid)
	if err != nil {
		t.Fatalf("find spanprof's counters map: %v", err)
	}
	defer counters.Close() // our handle keeps the map readable after spanprof exits

	// Keep both CPUs busy so every tick makes a sample.
	stopBurn := burnCPUs(2)
	defer stopBurn()
	time.Sleep(time.Second)
	// Stop the reader: the kernel keeps writing until the ring is full.
	rec.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(2 * time.Second)
	rec.cmd.Process.Signal(syscall.SIGCONT)
	hwm := rec.wait(t)

	kernel := readCounters(t, counters)
	p := readPprof(t, out)
	var written uint64
	for _, s := range p.Sample {
		written += uint64(s.Value[0])
	}
	lost := lostComments(p)
	t.Logf("kernel: samples %d, ring full %d; output: samples %d, lost %v; peak RSS %d MiB",
		kernel["samples"], kernel["ringbuf_full"], written, lost, hwm/1024)
	t.Logf("spanprof stderr:\n%s", rec.stderr)

	if kernel["ringbuf_full"] == 0 {
		t.Fatalf("the ring never overflowed (reader stopped 2 s at 10 kHz): the test did not test")
	}
	if lost["ringbuf_full"] != kernel["ringbuf_full"] {
		t.Errorf("output says %d lost to a full ring, the kernel counted %d", lost["ringbuf_full"], kernel["ringbuf_full"])
	}
	// Every submitted sample is written or counted lost in user space
	// (queue_full also counts dropped exec/exit events, hence >=).
	accounted := written + lost["queue_full"] + lost["decode"]
	if accounted < kernel["samples"] {
		// The reader drains the ring to its end once the programs are
		// detached (it stopped after a fixed 200 ms once).
		t.Errorf("kernel submitted %d samples, output has %d and user space counted %d lost: %d lost silently",
			kernel["samples"], written, lost["queue_full"]+lost["decode"], kernel["samples"]-accounted)
	}
	if hwm > 1024*1024 {
		t.Errorf("peak RSS %d MiB at 10 kHz", hwm/1024)
	}
}

// countersMap opens, by id, the "counters" map spanprof process pid holds.
func countersMap(pid int) (*ebpf.Map, error) {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			v, ok := strings.CutPrefix(line, "map_id:")
			if !ok {
				continue
			}
			id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			if err != nil {
				continue
			}
			m, err := ebpf.NewMapFromID(ebpf.MapID(id))
			if err != nil {
				continue
			}
			if info, err := m.Info(); err == nil && info.Name == "counters" {
				return m, nil
			}
			m.Close()
		}
	}
	return nil, fmt.Errorf("no map named counters among the descriptors of pid %d", pid)
}

func readCounters(t *testing.T, m *ebpf.Map) map[string]uint64 {
	t.Helper()
	names := map[bpf.SamplerDropCounter]string{
		bpf.SamplerDropCounterCNT_SAMPLES:      "samples",
		bpf.SamplerDropCounterCNT_RINGBUF_FULL: "ringbuf_full",
	}
	out := map[string]uint64{}
	for idx, name := range names {
		var perCPU []uint64
		if err := m.Lookup(uint32(idx), &perCPU); err != nil {
			t.Fatalf("read counter %s: %v", name, err)
		}
		for _, v := range perCPU {
			out[name] += v
		}
	}
	return out
}

// burnCPUs spins n goroutines until the returned function is called.
func burnCPUs(n int) func() {
	stop := make(chan struct{})
	for i := 0; i < n; i++ {
		go func() {
			x := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				for j := 0; j < 100000; j++ {
					x += j
				}
			}
		}()
	}
	return func() { close(stop) }
}
