package gopclntab

// Mapped reports whether Data is a mapping of the file rather than heap.
func (p *Table) Mapped() bool { return p != nil && p.mapped != nil }

// DropPages drops the resident pages of a mapped table: the next lookups
// fault in again, from the page cache, only the pages they touch. It is
// safe while other goroutines read the table.
func (p *Table) DropPages() {
	if p.Mapped() {
		p.mapped.DropPages()
	}
}
