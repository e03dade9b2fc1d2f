package correlate

import (
	"testing"
	"time"

	"github.com/spanprof/spanprof/bpf"
)

type fakeKernel struct {
	configs   map[uint32]bpf.SamplerProcConfig
	deletes   int
	loaders   []string // AttachLoader's paths, in order
	loaderErr error    // what AttachLoader returns
}

func (k *fakeKernel) SetProcConfig(pid uint32, cfg bpf.SamplerProcConfig) error {
	k.configs[pid] = cfg
	return nil
}
func (k *fakeKernel) DeleteProcConfig(pid uint32) error {
	k.deletes++
	delete(k.configs, pid)
	return nil
}
func (k *fakeKernel) AttachHook(string, uint64) error { return nil }
func (k *fakeKernel) AttachLoader(path string, _ uint64) error {
	k.loaders = append(k.loaders, path)
	return k.loaderErr
}

// TestExitKeepsResourceUntilForget checks that a process's published
// resource outlives its exit until the next report forgets it, while its
// kernel configuration goes at once.
func TestExitKeepsResourceUntilForget(t *testing.T) {
	k := &fakeKernel{configs: map[uint32]bpf.SamplerProcConfig{}}
	w := New(k, nil, nil)
	w.procs[42] = &state{info: Info{ServiceName: "checkout"}, resolved: true, configured: true}
	k.configs[42] = bpf.SamplerProcConfig{TlsKind: 1}

	w.Exit(42)
	if _, ok := k.configs[42]; ok {
		t.Fatal("kernel configuration kept after exit")
	}
	if info, ok := w.Info(42); !ok || info.ServiceName != "checkout" {
		t.Fatalf("info after exit = %+v, %v; want the service kept", info, ok)
	}
	w.ForgetExited(time.Now().Add(-time.Minute))
	if _, ok := w.Info(42); !ok {
		t.Fatal("info forgotten by a ForgetExited for exits before the exit")
	}
	w.ForgetExited(time.Now())
	if _, ok := w.Info(42); ok {
		t.Fatal("info kept after ForgetExited")
	}
}

// TestExecDeletesOnlyConfigured: an exec or exit deletes the kernel
// configuration of a process that has one, and spends no map operation
// on the others (most processes).
func TestExecDeletesOnlyConfigured(t *testing.T) {
	k := &fakeKernel{configs: map[uint32]bpf.SamplerProcConfig{}}
	w := New(k, nil, nil)
	w.procs[7] = &state{}
	w.Exec(7)
	w.Exec(8) // never seen
	w.Exit(9)
	if k.deletes != 0 {
		t.Fatalf("%d deletes for processes without a configuration, want 0", k.deletes)
	}
	w.procs[42] = &state{resolved: true, configured: true}
	k.configs[42] = bpf.SamplerProcConfig{TlsKind: 1}
	w.Exec(42)
	if _, ok := k.configs[42]; ok || k.deletes != 1 {
		t.Fatalf("after the exec of a configured process: %d deletes, configuration kept %v", k.deletes, ok)
	}
	w.procs[43] = &state{resolved: true, configured: true}
	k.configs[43] = bpf.SamplerProcConfig{TlsKind: 1}
	w.Exit(43)
	w.Exit(43)
	if _, ok := k.configs[43]; ok || k.deletes != 2 {
		t.Fatalf("after two exits of a configured process: %d deletes in all, configuration kept %v", k.deletes, ok)
	}
}

// TestSeenQueuesOnce checks that a process is queued for one scan, and
// again only after the rescan delay when no context source was found.
func TestSeenQueuesOnce(t *testing.T) {
	w := New(&fakeKernel{configs: map[uint32]bpf.SamplerProcConfig{}}, nil, nil)
	w.Seen(7, 1<<62)
	w.Seen(7, 1<<62)
	if n := len(w.queue); n != 1 {
		t.Fatalf("queued %d times, want 1", n)
	}
	w.Seen(7, 0) // rescan due immediately: not resolved yet
	if n := len(w.queue); n != 2 {
		t.Fatalf("queued %d times after the rescan delay, want 2", n)
	}
}

// TestSeenRescansAwaitingContext: a process whose OTEP 4947 thread
// context was found without a process context (a writer loaded late that
// publishes its context after the load) is rescanned after the delay, a
// bounded number of times; one with its process context, or read through
// Go labels alone, is not.
func TestSeenRescansAwaitingContext(t *testing.T) {
	w := New(&fakeKernel{configs: map[uint32]bpf.SamplerProcConfig{}}, nil, nil)
	tls := bpf.SamplerProcConfig{TlsKind: uint8(bpf.SamplerTlsKindTLS_DTV)}
	w.procs[7] = &state{resolved: true, scans: 9, cfg: tls}                     // awaits its process context
	w.procs[8] = &state{resolved: true, scans: 1, cfg: tls, ctxAddr: 0x1000}    // has it
	w.procs[9] = &state{resolved: true, scans: 1, cfg: bpf.SamplerProcConfig{}} // no TLS record
	for i := 0; i < 2*maxContextRescans; i++ {
		for pid := uint32(7); pid <= 9; pid++ {
			w.Seen(pid, 0)
		}
	}
	var got [10]int
	for len(w.queue) > 0 {
		got[(<-w.queue).pid]++
	}
	if got[7] != maxContextRescans || got[8] != 0 || got[9] != 0 {
		t.Fatalf("rescans queued: awaiting %d, with a process context %d, without a TLS record %d; want %d, 0, 0",
			got[7], got[8], got[9], maxContextRescans)
	}
	w.Seen(7, 1<<62) // within the delay: not again
	if len(w.queue) != 0 {
		t.Fatal("queued again within the rescan delay")
	}
}
