package gowait

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// BenchmarkSampleIdle measures one tick over a fixture with 10,000
// goroutines parked outside any span: "steady" ticks find them where the
// previous tick left them (the common case), "cold" ticks forget the
// cache first, so every stack is read and walked. It reports the agent's
// CPU time (user+sys, from getrusage, which a loaded machine does not
// inflate as much as wall time) per tick, per 1,000 goroutines, and as a
// share of one core at 19 Hz.
func BenchmarkSampleIdle(b *testing.B) {
	requirePtrace(b)
	const idle = 10000
	cmd, stdin := startService(b, "-idle", fmt.Sprint(idle), "-workers", "0", "-duration", "10m", "-out", b.TempDir()+"/truth")
	stdin.Write([]byte("go\n"))
	for _, cold := range []bool{false, true} {
		name := "steady"
		if cold {
			name = "cold"
		}
		b.Run(name, func(b *testing.B) {
			s := New(Options{})
			if err := s.Add(uint32(cmd.Process.Pid)); err != nil {
				b.Fatal(err)
			}
			s.SampleOnce(time.Now()) // name entry functions and fill the cache
			take(s)
			before := s.Stats()
			records := 0
			cpu0 := cpuTime()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if cold {
					for _, t := range s.targets {
						clear(t.cache) // every stack read afresh
					}
				}
				s.SampleOnce(time.Now())
				records += len(take(s)) // as the consumer takes each tick
			}
			b.StopTimer()
			perTick := float64(cpuTime()-cpu0) / float64(b.N)
			st := s.Stats()
			gs := float64(st.Goroutines-before.Goroutines) / float64(b.N)
			if gs < idle {
				b.Fatalf("read %.0f goroutines per tick, want ≥ %d", gs, idle)
			}
			b.ReportMetric(perTick, "cpu-ns/tick")
			b.ReportMetric(perTick/gs*1000, "cpu-ns/1000g")
			b.ReportMetric(perTick*DefaultFrequency/1e9*100, "%core@19Hz")
			b.ReportMetric(float64(records)/float64(b.N), "records/tick")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
