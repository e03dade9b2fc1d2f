package gopclntab

import (
	"sync"
	"sync/atomic"
)

// Store shares the Go function table of each binary between the caches
// that keep it: the symbolizer's parsed objects (internal/symbolize) and
// the unwind tables of the leaf fixer (internal/unwind) both hold the
// whole pclntab of every Go binary sampled, megabytes each, and would
// otherwise read and keep it twice.
//
// A table is shared by key (the file's build ID or content hash, or
// whatever else tells file contents apart) while at least one holder has
// claimed it, and forgotten when the last claim is released; the garbage
// collector frees it once no reader uses it either. Its bytes are charged
// to one holder at a time, so byte bounds that add Holder.Charged count a
// shared table once: the holder that claimed it first pays, and when that
// holder releases it the next one does.
type Store struct {
	mu   sync.Mutex
	tabs map[string]*shared
}

type shared struct {
	tab *Table
	// claims lists the holders in claim order, one element per claim (a
	// holder may claim a key twice while it replaces an entry);
	// claims[0] is charged.
	claims []*Holder
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{tabs: map[string]*shared{}}
}

// Holder returns a new claimant of the store's tables: one per cache.
func (s *Store) Holder() *Holder {
	return &Holder{store: s}
}

// Len reports how many tables are shared.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tabs)
}

// Bytes reports the pclntab heap bytes the store's tables hold, each once
// (mapped tables count none: MappedBytes).
func (s *Store) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, e := range s.tabs {
		n += e.tab.Size()
	}
	return n
}

// Holder is one cache's claims on the tables of a Store.
type Holder struct {
	store   *Store
	charged atomic.Int64
}

// Charged reports the bytes of the shared tables this holder pays for.
// It changes when another holder releases a table this one also claimed.
func (h *Holder) Charged() int64 { return h.charged.Load() }

// Claim returns the table of key, calling load only when no holder has
// claimed key. Each successful Claim wants one Release. load runs without
// the store's lock: two holders loading one key at once both read it, and
// the second gets the first's copy.
func (h *Holder) Claim(key string, load func() (*Table, error)) (*Table, error) {
	s := h.store
	s.mu.Lock()
	if e, ok := s.tabs[key]; ok {
		e.claims = append(e.claims, h)
		s.mu.Unlock()
		return e.tab, nil
	}
	s.mu.Unlock()
	tab, err := load()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.tabs[key]; ok {
		e.claims = append(e.claims, h)
		return e.tab, nil
	}
	s.tabs[key] = &shared{tab: tab, claims: []*Holder{h}}
	h.charged.Add(tab.Size())
	return tab, nil
}

// Release gives up one claim of h on key. The charge passes to the next
// claimant, if any; else the store forgets the table.
func (h *Holder) Release(key string) {
	s := h.store
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.tabs[key]
	if !ok {
		return
	}
	// The last claim of h, so that a holder with two claims keeps paying
	// rather than passing the charge on and back.
	i := len(e.claims) - 1
	for i >= 0 && e.claims[i] != h {
		i--
	}
	if i < 0 {
		return
	}
	e.claims = append(e.claims[:i], e.claims[i+1:]...)
	if i != 0 {
		return
	}
	n := e.tab.Size()
	h.charged.Add(-n)
	if len(e.claims) == 0 {
		delete(s.tabs, key)
		return
	}
	e.claims[0].charged.Add(n)
}

// Size is the memory the table holds, as the caches count it: its bytes
// when they are heap, none when they are a mapping of the file, whose
// pages Release drops (Store.DropPages, after every batch of lookups).
func (p *Table) Size() int64 {
	if p == nil || p.mapped != nil {
		return 0
	}
	return int64(len(p.Data))
}

// DropPages drops the resident pages of the mapped tables (Table.DropPages);
// the symbolizer calls it after each batch of lookups, so that the pages
// lookups touched stay resident for one batch at most.
func (s *Store) DropPages() {
	s.mu.Lock()
	tabs := make([]*Table, 0, len(s.tabs))
	for _, e := range s.tabs {
		tabs = append(tabs, e.tab)
	}
	s.mu.Unlock()
	for _, t := range tabs {
		t.DropPages()
	}
}

// MappedBytes reports the length of the mapped tables, each once: address
// space, of which only the pages touched since the last DropPages are
// resident.
func (s *Store) MappedBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, e := range s.tabs {
		if e.tab.Mapped() {
			n += int64(len(e.tab.Data))
		}
	}
	return n
}
