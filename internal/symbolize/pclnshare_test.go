package symbolize

import (
	"errors"
	"testing"
	"time"
)

// TestPclntabsChargeOnce checks the store's bookkeeping: a second holder
// gets the first one's table without loading it, the table is charged to
// one holder at a time, the charge passes on when that holder releases,
// and the table is forgotten with the last claim.
func TestPclntabsChargeOnce(t *testing.T) {
	store := NewPclntabs()
	a, b := store.Holder(), store.Holder()
	tab := &Pclntab{Data: make([]byte, 1000)}
	loads := 0
	load := func() (*Pclntab, error) { loads++; return tab, nil }

	pa, err := a.Claim("gnu:x", load)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := b.Claim("gnu:x", func() (*Pclntab, error) { return nil, errors.New("loaded twice") })
	if err != nil {
		t.Fatal(err)
	}
	if pa != tab || pb != tab || loads != 1 {
		t.Fatalf("claims got %p and %p of %p after %d loads, want the one table loaded once", pa, pb, tab, loads)
	}
	if a.Charged() != 1000 || b.Charged() != 0 || store.Bytes() != 1000 {
		t.Errorf("charged a %d, b %d, store %d; want 1000, 0, 1000", a.Charged(), b.Charged(), store.Bytes())
	}
	a.Release("gnu:x")
	if a.Charged() != 0 || b.Charged() != 1000 || store.Len() != 1 {
		t.Errorf("after a released: charged a %d, b %d, %d tables; want 0, 1000, 1", a.Charged(), b.Charged(), store.Len())
	}
	b.Release("gnu:x")
	b.Release("gnu:x") // a release too many is harmless
	if b.Charged() != 0 || store.Len() != 0 || store.Bytes() != 0 {
		t.Errorf("after both released: charged b %d, %d tables of %d bytes; want none", b.Charged(), store.Len(), store.Bytes())
	}
	if _, err := a.Claim("gnu:x", load); err != nil || loads != 2 {
		t.Errorf("claim after the last release: err %v, %d loads; want the table loaded again", err, loads)
	}
	if _, err := a.Claim("gnu:y", func() (*Pclntab, error) { return nil, ErrNoPclntab }); !errors.Is(err, ErrNoPclntab) || store.Len() != 1 {
		t.Errorf("failed load: err %v, %d tables; want ErrNoPclntab and nothing kept", err, store.Len())
	}
}

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
