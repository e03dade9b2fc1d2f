package tracectx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/testutil"
)

// goFakeMem is a sparse little-endian address space for walking label
// structures without a live process.
type goFakeMem map[uint64]byte

func (m goFakeMem) ReadAt(b []byte, off int64) (int, error) {
	for i := range b {
		v, ok := m[uint64(off)+uint64(i)]
		if !ok {
			return i, fmt.Errorf("fault at %#x", uint64(off)+uint64(i))
		}
		b[i] = v
	}
	return len(b), nil
}

func (m goFakeMem) u64(addr, v uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	m.bytes(addr, b[:])
}

func (m goFakeMem) bytes(addr uint64, b []byte) {
	for i, c := range b {
		m[addr+uint64(i)] = c
	}
}

// str stores s at data and its {ptr, len} header at hdr.
func (m goFakeMem) str(hdr, data uint64, s string) {
	m.bytes(data, []byte(s))
	m.u64(hdr, data)
	m.u64(hdr+8, uint64(len(s)))
}

var goFakeInfo = map[GoLabelLayout]*GoRuntimeInfo{
	GoLabelsSlice: {TLSG: -8, OffM: 48, OffCurg: 184, OffLockedg: 384, OffLabels: 352, Layout: GoLabelsSlice, Slice: goLabelSlice},
	GoLabelsMap:   {TLSG: -24, OffM: 48, OffCurg: 192, OffLockedg: 352, OffLabels: 344, Layout: GoLabelsMap, Map: goMapStringString},
}

const (
	fakeFS, fakeG0, fakeM, fakeCurg, fakeLabels = 0x10000, 0x20000, 0x30000, 0x40000, 0x50000
	fakeArr, fakeStrs, fakeHmap, fakeBuckets    = 0x60000, 0x70000, 0x80000, 0x90000
)

// goFakeProcess lays out fsbase → g0 → m → curg → labels for info, with
// the given labels and no goroutine locked to the thread (m.lockedg 0);
// set* hooks break one link.
func goFakeProcess(info *GoRuntimeInfo, labels [][2]string, overflowAt int) goFakeMem {
	m := goFakeMem{}
	m.u64(uint64(fakeFS+info.TLSG), fakeG0)
	m.u64(fakeG0+uint64(info.OffM), fakeM)
	m.u64(fakeM+uint64(info.OffCurg), fakeCurg)
	m.u64(fakeM+uint64(info.OffLockedg), 0)
	m.u64(fakeCurg+uint64(info.OffLabels), fakeLabels)
	strs := uint64(fakeStrs)
	switch info.Layout {
	case GoLabelsSlice:
		l := info.Slice
		m.u64(fakeLabels+uint64(l.List), fakeArr)
		m.u64(fakeLabels+uint64(l.List)+8, uint64(len(labels)))
		m.u64(fakeLabels+uint64(l.List)+16, uint64(len(labels)))
		for i, kv := range labels {
			base := fakeArr + uint64(i)*uint64(l.LabelSize)
			m.str(base+uint64(l.Key), strs, kv[0])
			m.str(base+uint64(l.Value), strs+0x100, kv[1])
			strs += 0x200
		}
	case GoLabelsMap:
		l := info.Map
		m.u64(fakeLabels, fakeHmap)
		m.u64(fakeHmap+uint64(l.HmapCount), uint64(len(labels)))
		m[fakeHmap+uint64(l.HmapB)] = 0
		m.u64(fakeHmap+uint64(l.HmapBuckets), fakeBuckets)
		m.u64(fakeHmap+uint64(l.HmapOld), 0)
		bucket, slot := uint64(fakeBuckets), 0
		m.bytes(bucket, make([]byte, l.BucketSize))
		for i, kv := range labels {
			if i == overflowAt {
				next := bucket + 0x1000
				m.bytes(next, make([]byte, l.BucketSize))
				m.u64(bucket+uint64(l.Overflow), next)
				bucket, slot = next, 0
			}
			// Leave an empty slot (tophash 1, emptyOne) before each
			// entry of the first bucket, as deletions would.
			m[bucket+uint64(l.Tophash)+uint64(slot)] = 0xa0 + byte(i)
			m.str(bucket+uint64(l.Keys)+uint64(slot)*16, strs, kv[0])
			m.str(bucket+uint64(l.Values)+uint64(slot)*16, strs+0x100, kv[1])
			strs += 0x200
			slot++
		}
	}
	return m
}

func TestReadGoLabelsWalk(t *testing.T) {
	three := [][2]string{{"span_id", "00f067aa0ba902b7"}, {"span_name", "GET /"}, {"trace_id", "4bf92f3577b34da6a3ce929d0e0e4736"}}
	want := map[string]string{"span_id": "00f067aa0ba902b7", "span_name": "GET /", "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}
	tests := []struct {
		name      string
		layout    GoLabelLayout
		labels    [][2]string
		overAt    int
		mutate    func(m goFakeMem, info *GoRuntimeInfo)
		noLockedg bool // OffLockedg unknown (0)
		want      map[string]string
		wantErr   bool
	}{
		{name: "slice", layout: GoLabelsSlice, labels: three, want: want},
		{name: "map", layout: GoLabelsMap, labels: three, overAt: -1, want: want},
		{name: "map with overflow bucket", layout: GoLabelsMap, labels: three, overAt: 2, want: want},
		{name: "no g in TLS", layout: GoLabelsSlice, labels: three, mutate: func(m goFakeMem, i *GoRuntimeInfo) {
			m.u64(uint64(fakeFS+i.TLSG), 0)
		}},
		{name: "no goroutine on the M", layout: GoLabelsSlice, labels: three, mutate: func(m goFakeMem, i *GoRuntimeInfo) {
			m.u64(fakeM+uint64(i.OffCurg), 0)
		}},
		{name: "scheduler of a locked goroutine", layout: GoLabelsSlice, labels: three, want: want, mutate: func(m goFakeMem, i *GoRuntimeInfo) {
			m.u64(fakeM+uint64(i.OffCurg), 0)
			m.u64(fakeM+uint64(i.OffLockedg), fakeCurg)
		}},
		{name: "scheduler of a locked goroutine, map", layout: GoLabelsMap, labels: three, overAt: -1, want: want, mutate: func(m goFakeMem, i *GoRuntimeInfo) {
			m.u64(fakeM+uint64(i.OffCurg), 0)
			m.u64(fakeM+uint64(i.OffLockedg), fakeCurg)
		}},
		{name: "scheduler, lockedg offset unknown", layout: GoLabelsSlice, labels: three, noLockedg: true, mutate: func(m goFakeMem, i *GoRuntimeInfo) {
			m.u64(fakeM+uint64(i.OffCurg), 0)
			m.u64(fakeM+uint64(i.OffLockedg), fakeCurg)
		}},
		{name: "running goroutine wins over lockedg", layout: GoLabelsSlice, labels: three, want: want, mutate: func(m goFakeMem, i *GoRuntimeInfo) {
			m.u64(fakeM+uint64(i.OffLockedg), 0xdead0000) // never read
		}},
		{name: "unreadable lockedg", layout: GoLabelsSlice, labels: three, wantErr: true, mutate: func(m goFakeMem, i *GoRuntimeInfo) {
			m.u64(fakeM+uint64(i.OffCurg), 0)
			for b := uint64(0); b < 8; b++ {
				delete(m, fakeM+uint64(i.OffLockedg)+b)
			}
		}},
		{name: "goroutine without labels", layout: GoLabelsMap, labels: three, overAt: -1, mutate: func(m goFakeMem, i *GoRuntimeInfo) {
			m.u64(fakeCurg+uint64(i.OffLabels), 0)
		}},
		{name: "g without m", layout: GoLabelsSlice, labels: three, wantErr: true, mutate: func(m goFakeMem, i *GoRuntimeInfo) {
			m.u64(fakeG0+uint64(i.OffM), 0)
		}},
		{name: "unmapped label string", layout: GoLabelsSlice, labels: three, wantErr: true, mutate: func(m goFakeMem, i *GoRuntimeInfo) {
			m.u64(fakeArr+8, 0xdead0000) // first key's data pointer
		}},
		{name: "map count disagrees", layout: GoLabelsMap, labels: three, overAt: -1, wantErr: true, mutate: func(m goFakeMem, i *GoRuntimeInfo) {
			m.u64(fakeHmap+uint64(i.Map.HmapCount), 4)
		}},
		{name: "absurd slice length", layout: GoLabelsSlice, labels: three, wantErr: true, mutate: func(m goFakeMem, i *GoRuntimeInfo) {
			m.u64(fakeLabels+8, 1<<40)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := goFakeInfo[tt.layout]
			if tt.noLockedg {
				i := *info
				i.OffLockedg = 0
				info = &i
			}
			mem := goFakeProcess(info, tt.labels, tt.overAt)
			if tt.mutate != nil {
				tt.mutate(mem, info)
			}
			got, err := ReadGoLabels(mem, fakeFS, info)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if !reflect.DeepEqual(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
				t.Errorf("labels %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("map growing", func(t *testing.T) {
		info := goFakeInfo[GoLabelsMap]
		mem := goFakeProcess(info, three, -1)
		mem.u64(fakeHmap+uint64(info.Map.HmapOld), fakeBuckets+0x8000)
		if _, err := ReadGoLabels(mem, fakeFS, info); !errors.Is(err, ErrGoMapGrowing) {
			t.Errorf("err = %v, want ErrGoMapGrowing", err)
		}
	})
}

var _ io.ReaderAt = goFakeMem(nil)

// TestReadLabelsLive runs the labels fixture of every covered Go release,
// plain, stripped and (current Go) cgo, and reads each worker thread's
// labels from outside, through the offsets GoOffsets derived. Parked
// workers leave their threads in the scheduler with m.curg nil: their
// labels are found through m.lockedg, on the first read.
func TestReadLabelsLive(t *testing.T) {
	testutil.RequireRoot(t, "ptrace and process_vm_readv of another process need root")
	var builds []goFixtureBuild
	for _, tc := range goFixtureToolchains {
		builds = append(builds, goFixtureBuild{toolchain: tc, pkg: "labels"}, goFixtureBuild{toolchain: tc, pkg: "labels", stripped: true})
	}
	builds = append(builds,
		goFixtureBuild{toolchain: "local", pkg: "labels", cgo: true},
		goFixtureBuild{toolchain: "local", pkg: "labels", cgo: true, stripped: true})
	modes := []struct {
		extra int
		park  bool
	}{
		{0, false},  // 3 labels
		{10, false}, // 13 labels: a map of 2 buckets
		{0, true},
	}
	for _, b := range builds {
		for _, m := range modes {
			name := fmt.Sprintf("%s/labels=%d", b.name(), 3+m.extra)
			if m.park {
				name += "/parked"
			}
			t.Run(name, func(t *testing.T) {
				bin := buildGoFixture(t, b)
				info, err := GoOffsets(bin)
				if err != nil {
					t.Fatalf("GoOffsets: %v", err)
				}
				if info.OffLockedg == 0 {
					t.Fatalf("GoOffsets found no m.lockedg offset (source %s)", info.Source)
				}
				pid, workers := startLabelsFixture(t, bin, 3, m.extra, m.park)
				for _, w := range workers {
					if m.park {
						goExpectParkedLabels(t, pid, w, info)
					} else {
						goExpectLabels(t, pid, w, info)
					}
				}
			})
		}
	}
}

// goExpectLabels reads w's thread until it shows w's labels. The thread
// runs only w's goroutine, in the scheduler too (sysmon preempts it after
// 10 ms, and it waits there until it runs again): every read should find
// the labels, through m.curg or m.lockedg. Retries are left for a read
// that races the runtime; a read must never return other labels.
func goExpectLabels(t *testing.T, pid int, w labelsWorker, info *GoRuntimeInfo) {
	t.Helper()
	const attempts = 200
	empty := 0
	for i := 0; i < attempts; i++ {
		if i > 0 {
			time.Sleep(5 * time.Millisecond) // let the scheduler run the goroutine again
		}
		got, err := ReadLabels(pid, w.tid, info)
		if err != nil {
			t.Fatalf("ReadLabels(tid %d): %v", w.tid, err)
		}
		if len(got) == 0 {
			empty++
			continue
		}
		if !reflect.DeepEqual(got, w.labels) {
			t.Fatalf("tid %d: labels %v, want %v", w.tid, got, w.labels)
		}
		if empty > 0 {
			t.Logf("tid %d: %d reads found no goroutine before the labels", w.tid, empty)
		}
		return
	}
	t.Errorf("tid %d: no labels in %d reads", w.tid, attempts)
}

// goExpectParkedLabels reads the thread of a parked worker once: m.curg is
// nil for good, so the labels come from m.lockedg or not at all.
func goExpectParkedLabels(t *testing.T, pid int, w labelsWorker, info *GoRuntimeInfo) {
	t.Helper()
	got, err := ReadLabels(pid, w.tid, info)
	if err != nil {
		t.Fatalf("ReadLabels(tid %d): %v", w.tid, err)
	}
	if !reflect.DeepEqual(got, w.labels) {
		t.Errorf("parked tid %d: labels %v, want %v", w.tid, got, w.labels)
	}
}
