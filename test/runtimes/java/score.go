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
type Window struct {
	Trace, Span, Name, Route     string
	OuterFrom, From, To, OuterTo uint64
}

type SpanTruth struct {
	Setup, From, To uint64
	ByTID           map[int][]Window
}

func ReadTruth(t *testing.T, path string) SpanTruth {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := SpanTruth{ByTID: map[int][]Window{}}
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
			tr.Setup = num(p[1])
		case len(p) == 3 && p[0] == "measure":
			tr.From, tr.To = num(p[1]), num(p[2])
		case len(p) == 10 && p[0] == "seg":
			tid, _ := strconv.Atoi(p[1])
			route := p[5]
			if route == "-" {
				route = ""
			}
			tr.ByTID[tid] = append(tr.ByTID[tid], Window{p[2], p[3], p[4], route, num(p[6]), num(p[7]), num(p[8]), num(p[9])})
		case len(p) == 6 && p[0] == "gap":
			tid, _ := strconv.Atoi(p[1])
			tr.ByTID[tid] = append(tr.ByTID[tid], Window{"", "", "", "", num(p[2]), num(p[3]), num(p[4]), num(p[5])})
		default:
			t.Fatalf("bad truth line %q", sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if tr.From == 0 || len(tr.ByTID) == 0 {
		t.Fatalf("truth %s: no measured spans", path)
	}
	return tr
}

type Scored struct {
	InSpan, InSpanRight   int // samples inside a span's inner window; those with its ids
	Linked, Wrong         int // measured samples with a link; those no window of their span holds
	Gap, GapLinked        int // samples inside gaps; those with a link
	LinkedRight           int // in-span samples with the right ids
	NameRight, RouteRight int // of those, with the right span.name / http.route
	FirstLink             uint64
}

// Score judges every event in the measured time: one inside a span's inner
// window (50µs clear of its ends) must carry that span's ids; one inside a
// gap none; a linked one must lie in a window of its span (within 50µs),
// on the thread that ran it, else it is wrong.
func Score(samples []truth.Sample, tr SpanTruth) Scored {
	return ScoreAttr(samples, tr, "http.route")
}

// ScoreAttr is Score with the truth's route column checked against the
// sample attribute key instead of http.route.
func ScoreAttr(samples []truth.Sample, tr SpanTruth, key string) Scored {
	const margin = uint64(50 * time.Microsecond)
	var c Scored
	for _, s := range samples {
		if s.Kind != "samples" {
			continue
		}
		tid, _ := strconv.Atoi(s.Attrs["thread.id"])
		ws := tr.ByTID[tid]
		for _, ts := range s.Times {
			if s.Trace != "" && (c.FirstLink == 0 || ts < c.FirstLink) {
				c.FirstLink = ts
			}
			if ts < tr.From || ts > tr.To {
				continue
			}
			for i := range ws {
				w := &ws[i]
				if ts < w.From+margin || ts+margin > w.To {
					continue
				}
				if w.Span == "" {
					c.Gap++
					if s.Trace != "" {
						c.GapLinked++
					}
					break
				}
				c.InSpan++
				if s.Trace == w.Trace && s.Span == w.Span {
					c.InSpanRight++
					c.LinkedRight++
					if s.Attrs["span.name"] == w.Name {
						c.NameRight++
					}
					if route, ok := s.Attrs[key]; route == w.Route && ok == (w.Route != "") {
						c.RouteRight++
					}
				}
				break
			}
			if s.Trace == "" {
				continue
			}
			c.Linked++
			right := false
			for i := range ws {
				w := &ws[i]
				if w.Span == s.Span && w.Trace == s.Trace && ts+margin >= w.OuterFrom && ts <= w.OuterTo+margin {
					right = true
					break
				}
			}
			if !right {
				c.Wrong++
				if os.Getenv("SPANPROF_DEBUG_CORRELATION") != "" {
					near := int64(1 << 62)
					for _, w := range ws {
						if w.Span == s.Span {
							d := int64(ts) - int64(w.OuterTo)
							if int64(ts) < int64(w.OuterFrom) {
								d = int64(ts) - int64(w.OuterFrom)
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

// RootSpans maps each trace to the span id of its windows named name
// (SpanWork's root span, "work.root"): the local root of every span of
// the trace.
func (tr SpanTruth) RootSpans(name string) map[string]string {
	roots := map[string]string{}
	for _, ws := range tr.ByTID {
		for _, w := range ws {
			if w.Name == name && w.Span != "" {
				roots[w.Trace] = w.Span
			}
		}
	}
	return roots
}
