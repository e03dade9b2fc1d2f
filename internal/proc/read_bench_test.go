package proc

import (
	"os"
	"testing"
)

// BenchmarkRead reads this test process from /proc as an exec does: maps,
// exe, stat, comm, cgroup and environ (its mapped files are held after the
// first read, as under churn of one executable).
func BenchmarkRead(b *testing.B) {
	tr := NewTracker("/proc", nil)
	pid := uint32(os.Getpid())
	tr.mu.Lock()
	defer tr.mu.Unlock()
	held, err := tr.read(pid)
	if err != nil {
		b.Fatal(err)
	}
	defer tr.release(held)
	b.ReportAllocs()
	for b.Loop() {
		p, err := tr.read(pid)
		if err != nil {
			b.Fatal(err)
		}
		tr.release(p)
	}
}
