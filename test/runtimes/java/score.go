package java

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/test/truth"
)

// window is one stretch of a thread's time: its innermost context was the
// span (trace, span ids; "" in a gap) from inner start to inner end, and
// at least around the context switches, from outer start to outer end.
type window struct {
	trace, span, name, route     string
	outerFrom, from, to, outerTo uint64
}

type spanTruth struct {
	setup, from, to uint64
	byTID           map[int][]window
}

func readTruth(t *testing.T, path string) spanTruth {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := spanTruth{byTID: map[int][]window{}}
	num := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("truth %s: %v", path, err)
		}
		return v
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Fields(sc.Text())
		switch {
		case len(p) == 2 && p[0] == "setup":
			tr.setup = num(p[1])
		case len(p) == 3 && p[0] == "measure":
			tr.from, tr.to = num(p[1]), num(p[2])
		case len(p) == 10 && p[0] == "seg":
			tid, _ := strconv.Atoi(p[1])
			route := p[5]
			if route == "-" {
				route = ""
			}
			tr.byTID[tid] = append(tr.byTID[tid], window{p[2], p[3], p[4], route, num(p[6]), num(p[7]), num(p[8]), num(p[9])})
		case len(p) == 6 && p[0] == "gap":
			tid, _ := strconv.Atoi(p[1])
			tr.byTID[tid] = append(tr.byTID[tid], window{"", "", "", "", num(p[2]), num(p[3]), num(p[4]), num(p[5])})
		default:
			t.Fatalf("bad truth line %q", sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if tr.from == 0 || len(tr.byTID) == 0 {
		t.Fatalf("truth %s: no measured spans", path)
	}
	return tr
}

type scored struct {
	inSpan, inSpanRight   int // samples inside a span's inner window; those with its ids
	linked, wrong         int // measured samples with a link; those no window of their span holds
	gap, gapLinked        int // samples inside gaps; those with a link
	linkedRight           int // in-span samples with the right ids
	nameRight, routeRight int // of those, with the right span.name / http.route
	firstLink             uint64
}

// score judges every event in the measured time: one inside a span's inner
// window (50µs clear of its ends) must carry that span's ids; one inside a
// gap none; a linked one must lie in a window of its span (within 50µs),
// on the thread that ran it, else it is wrong.
func score(samples []truth.Sample, tr spanTruth) scored {
	const margin = uint64(50 * time.Microsecond)
	var c scored
	for _, s := range samples {
		if s.Kind != "samples" {
			continue
		}
		tid, _ := strconv.Atoi(s.Attrs["thread.id"])
		ws := tr.byTID[tid]
		for _, ts := range s.Times {
			if s.Trace != "" && (c.firstLink == 0 || ts < c.firstLink) {
				c.firstLink = ts
			}
			if ts < tr.from || ts > tr.to {
				continue
			}
			for i := range ws {
				w := &ws[i]
				if ts < w.from+margin || ts+margin > w.to {
					continue
				}
				if w.span == "" {
					c.gap++
					if s.Trace != "" {
						c.gapLinked++
					}
					break
				}
				c.inSpan++
				if s.Trace == w.trace && s.Span == w.span {
					c.inSpanRight++
					c.linkedRight++
					if s.Attrs["span.name"] == w.name {
						c.nameRight++
					}
					if route, ok := s.Attrs["http.route"]; route == w.route && ok == (w.route != "") {
						c.routeRight++
					}
				}
				break
			}
			if s.Trace == "" {
				continue
			}
			c.linked++
			right := false
			for i := range ws {
				w := &ws[i]
				if w.span == s.Span && w.trace == s.Trace && ts+margin >= w.outerFrom && ts <= w.outerTo+margin {
					right = true
					break
				}
			}
			if !right {
				c.wrong++
				if os.Getenv("SPANPROF_DEBUG_CORRELATION") != "" {
					near := int64(1 << 62)
					for _, w := range ws {
						if w.span == s.Span {
							d := int64(ts) - int64(w.outerTo)
							if int64(ts) < int64(w.outerFrom) {
								d = int64(ts) - int64(w.outerFrom)
							}
							if abs(d) < abs(near) {
								near = d
							}
						}
					}
					fmt.Printf("wrong: tid %d (truth windows %d) span %s, nearest window of the span %dus away, frames %v\n", tid, len(ws), s.Span, near/1000, s.Frames)
				}
			}
		}
	}
	return c
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
