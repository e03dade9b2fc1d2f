package symbolize

import (
	"testing"
	"time"
)

// fakeClock is a settable clock for the idle timeouts.
type fakeClock struct{ t time.Time }

func newFakeClock() *fakeClock           { return &fakeClock{t: time.Unix(1e9, 0)} }
func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }

// TestIdleObjectsExpire checks that Trim drops the objects Open has not
// returned for IdleTimeout, counts them, and gives their pclntab back.
func TestIdleObjectsExpire(t *testing.T) {
	gcc, goprog := fixture("chain-gcc"), fixture("goprog")
	clock := newFakeClock()
	s := New(nil, Options{IdleTimeout: 5 * time.Minute, Now: clock.now})
	open := func(path string) {
		t.Helper()
		if _, err := s.Open(path, path); err != nil {
			t.Fatal(err)
		}
	}
	open(gcc)
	clock.add(4 * time.Minute)
	open(goprog)
	goBytes := s.Bytes()
	clock.add(2 * time.Minute)
	s.Trim()
	if s.Len() != 1 || s.Stats().Expired != 1 || s.Stats().Evicted != 1 {
		t.Fatalf("after chain-gcc idled 6m: %d objects, %+v; want goprog alone, one expired", s.Len(), s.Stats())
	}
	if s.Pclntabs().Len() != 1 {
		t.Errorf("%d pclntabs shared, want goprog's", s.Pclntabs().Len())
	}
	// A lookup renews the object.
	clock.add(2 * time.Minute)
	open(goprog)
	clock.add(4 * time.Minute)
	s.Trim()
	if s.Len() != 1 || s.Stats().Parsed != 2 {
		t.Errorf("goprog opened 4m ago: %d objects, %+v; want it kept, not parsed again", s.Len(), s.Stats())
	}
	if got := s.Bytes(); got >= goBytes || got <= 0 {
		// chain-gcc's share is gone, goprog's stays.
		t.Errorf("%d bytes held, want goprog's alone (under %d)", got, goBytes)
	}
	clock.add(time.Minute + time.Second)
	s.Trim()
	if s.Len() != 0 || s.Bytes() != 0 || s.Pclntabs().Len() != 0 || s.Stats().Expired != 2 {
		t.Errorf("everything idle: %d objects, %d bytes, %d pclntabs, %+v; want none left, two expired",
			s.Len(), s.Bytes(), s.Pclntabs().Len(), s.Stats())
	}

	// A negative timeout keeps objects.
	keep := New(nil, Options{IdleTimeout: -1, Now: clock.now})
	if _, err := keep.Open(gcc, gcc); err != nil {
		t.Fatal(err)
	}
	clock.add(time.Hour)
	keep.Trim()
	if keep.Len() != 1 {
		t.Errorf("IdleTimeout -1 dropped the object")
	}
}
