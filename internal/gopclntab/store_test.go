package gopclntab

import (
	"errors"
	"testing"
)

// TestStoreChargeOnce checks the store's bookkeeping: a second holder
// gets the first one's table without loading it, the table is charged to
// one holder at a time, the charge passes on when that holder releases,
// and the table is forgotten with the last claim.
func TestStoreChargeOnce(t *testing.T) {
	store := NewStore()
	a, b := store.Holder(), store.Holder()
	tab := &Table{Data: make([]byte, 1000)}
	loads := 0
	load := func() (*Table, error) { loads++; return tab, nil }

	pa, err := a.Claim("gnu:x", load)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := b.Claim("gnu:x", func() (*Table, error) { return nil, errors.New("loaded twice") })
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
	if _, err := a.Claim("gnu:y", func() (*Table, error) { return nil, ErrNotFound }); !errors.Is(err, ErrNotFound) || store.Len() != 1 {
		t.Errorf("failed load: err %v, %d tables; want ErrNotFound and nothing kept", err, store.Len())
	}
}
