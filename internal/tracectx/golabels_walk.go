package tracectx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Bounds of what ReadGoLabels follows, so a torn or hostile address space
// cannot make it loop or allocate without limit. The eBPF program has
// smaller, verifier-friendly bounds of its own.
const (
	goMaxLabels    = 64
	goMaxLabelLen  = 4096
	goMaxBucketLog = 6 // 64 buckets: 512 labels before overflow
	goMinTopHash   = 5 // tophash values below this mark empty or moved slots
)

// ErrGoMapGrowing is returned for a Go <= 1.23 label map caught while it
// grows (oldbuckets set): its entries are split between two tables. Label
// maps are built before they are published, so this means a torn read.
var ErrGoMapGrowing = errors.New("go label map is growing")

// ReadGoLabels reads the pprof labels of the goroutine running on the thread
// whose thread pointer is fsbase, through mem (the process's memory). It
// performs the reads, in the order, that the eBPF program performs for an
// on-CPU sample:
//
//	g      = *(fsbase + TLSG)        0: not a Go thread yet → no labels
//	m      = *(g + OffM)
//	curg   = *(m + OffCurg)          0: the scheduler runs (g0), then
//	curg   = *(m + OffLockedg)       the goroutine locked to the thread;
//	                                 0: scheduler or idle → no labels
//	labels = *(curg + OffLabels)     0: goroutine without labels
//
// then the label set in info.Layout. A nil map and nil error mean no labels.
func ReadGoLabels(mem io.ReaderAt, fsbase uint64, info *GoRuntimeInfo) (map[string]string, error) {
	g, err := goReadPtr(mem, uint64(int64(fsbase)+info.TLSG))
	if err != nil || g == 0 {
		return nil, err
	}
	return ReadGoLabelsOfG(mem, g, info)
}

// ReadGoLabelsOfG does ReadGoLabels's walk from g itself, for arm64, where
// the runtime keeps g in register x28 rather than in TLS.
func ReadGoLabelsOfG(mem io.ReaderAt, g uint64, info *GoRuntimeInfo) (map[string]string, error) {
	if g == 0 {
		return nil, nil
	}
	m, err := goReadPtr(mem, g+uint64(info.OffM))
	if err != nil {
		return nil, err
	}
	if m == 0 {
		return nil, fmt.Errorf("read g.m: g %#x has no m", g)
	}
	curg, err := goReadPtr(mem, m+uint64(info.OffCurg))
	if err != nil {
		return nil, err
	}
	if curg == 0 && info.OffLockedg != 0 {
		// The scheduler, working for the goroutine locked to the thread.
		if curg, err = goReadPtr(mem, m+uint64(info.OffLockedg)); err != nil {
			return nil, err
		}
	}
	if curg == 0 {
		return nil, nil
	}
	labels, err := goReadPtr(mem, curg+uint64(info.OffLabels))
	if err != nil || labels == 0 {
		return nil, err
	}
	switch info.Layout {
	case GoLabelsSlice:
		return goReadLabelSlice(mem, labels, &info.Slice)
	case GoLabelsMap:
		return goReadLabelMap(mem, labels, &info.Map)
	default:
		return nil, fmt.Errorf("read labels: layout %v: %w", info.Layout, ErrUnsupportedGo)
	}
}

// goReadLabelSlice reads labelMap{list []label}: the slice header at
// labels+List, then len labels of LabelSize bytes.
func goReadLabelSlice(mem io.ReaderAt, labels uint64, l *GoSliceLayout) (map[string]string, error) {
	var hdr [16]byte // array pointer, len
	if _, err := mem.ReadAt(hdr[:], int64(labels+uint64(l.List))); err != nil {
		return nil, fmt.Errorf("read label slice header: %w", err)
	}
	arr, n := binary.LittleEndian.Uint64(hdr[:]), binary.LittleEndian.Uint64(hdr[8:])
	if n > goMaxLabels {
		return nil, fmt.Errorf("read label slice: %d labels, more than %d", n, goMaxLabels)
	}
	out := make(map[string]string, n)
	for i := uint64(0); i < n; i++ {
		base := arr + i*uint64(l.LabelSize)
		k, err := goReadString(mem, base+uint64(l.Key))
		if err != nil {
			return nil, err
		}
		v, err := goReadString(mem, base+uint64(l.Value))
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}

// goReadLabelMap reads a map[string]string: labels points to the map
// variable, which holds the *hmap. Buckets are BucketSize bytes: tophash[8],
// keys[8], values[8], overflow pointer; a slot is live when its tophash is
// at least 5.
func goReadLabelMap(mem io.ReaderAt, labels uint64, l *GoMapLayout) (map[string]string, error) {
	hmap, err := goReadPtr(mem, labels)
	if err != nil || hmap == 0 {
		return nil, err
	}
	count, err := goReadPtr(mem, hmap+uint64(l.HmapCount))
	if err != nil {
		return nil, err
	}
	var b [1]byte
	if _, err := mem.ReadAt(b[:], int64(hmap+uint64(l.HmapB))); err != nil {
		return nil, fmt.Errorf("read hmap.B: %w", err)
	}
	buckets, err := goReadPtr(mem, hmap+uint64(l.HmapBuckets))
	if err != nil {
		return nil, err
	}
	old, err := goReadPtr(mem, hmap+uint64(l.HmapOld))
	if err != nil {
		return nil, err
	}
	switch {
	case count > goMaxLabels || b[0] > goMaxBucketLog:
		return nil, fmt.Errorf("read label map: %d labels in 2^%d buckets, too many", count, b[0])
	case old != 0:
		return nil, ErrGoMapGrowing
	case count == 0 || buckets == 0:
		return map[string]string{}, nil
	}
	out := make(map[string]string, count)
	for i := uint64(0); i < 1<<b[0]; i++ {
		// Each bucket chain is bounded by the labels it can hold.
		bucket := buckets + i*uint64(l.BucketSize)
		for hops := 0; bucket != 0 && hops <= goMaxLabels/8; hops++ {
			if err := goReadBucket(mem, bucket, l, out); err != nil {
				return nil, err
			}
			if bucket, err = goReadPtr(mem, bucket+uint64(l.Overflow)); err != nil {
				return nil, err
			}
		}
	}
	if uint64(len(out)) != count {
		return nil, fmt.Errorf("read label map: found %d of %d labels", len(out), count)
	}
	return out, nil
}

func goReadBucket(mem io.ReaderAt, bucket uint64, l *GoMapLayout, out map[string]string) error {
	var top [8]byte
	if _, err := mem.ReadAt(top[:], int64(bucket+uint64(l.Tophash))); err != nil {
		return fmt.Errorf("read bucket tophash: %w", err)
	}
	for i, h := range top {
		if h < goMinTopHash {
			continue
		}
		k, err := goReadString(mem, bucket+uint64(l.Keys)+uint64(i)*16)
		if err != nil {
			return err
		}
		v, err := goReadString(mem, bucket+uint64(l.Values)+uint64(i)*16)
		if err != nil {
			return err
		}
		out[k] = v
	}
	return nil
}

func goReadPtr(mem io.ReaderAt, addr uint64) (uint64, error) {
	var b [8]byte
	if _, err := mem.ReadAt(b[:], int64(addr)); err != nil {
		return 0, fmt.Errorf("read pointer at %#x: %w", addr, err)
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// goReadString reads a Go string header {ptr, len} at addr and its bytes.
func goReadString(mem io.ReaderAt, addr uint64) (string, error) {
	var hdr [16]byte
	if _, err := mem.ReadAt(hdr[:], int64(addr)); err != nil {
		return "", fmt.Errorf("read string header at %#x: %w", addr, err)
	}
	p, n := binary.LittleEndian.Uint64(hdr[:]), binary.LittleEndian.Uint64(hdr[8:])
	if n == 0 {
		return "", nil
	}
	if n > goMaxLabelLen {
		return "", fmt.Errorf("read string at %#x: length %d", addr, n)
	}
	buf := make([]byte, n)
	if _, err := mem.ReadAt(buf, int64(p)); err != nil {
		return "", fmt.Errorf("read string bytes at %#x: %w", p, err)
	}
	return string(buf), nil
}
