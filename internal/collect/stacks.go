package collect

import "encoding/binary"

// stackTable holds each distinct stack of a report interval once: the
// process, its kernel frames and its user frames, as addresses. Samples
// refer to a stack by its id, so that what the collector keeps between
// reports grows with the distinct stacks, not with the records (200
// processes with off-CPU sampling send some 4,000 records a second over a
// few hundred stacks).
//
// A stack is stored as its key, the bytes of pid, image, kernel frame
// count, kernel frames and user frames (little endian): the map needs the
// key anyway, and a second copy as []uint64 would double the table. The
// image names what the user frames are symbolized against: the
// generation of the image the sample was resolved to (proc.Process.Gen),
// which the interval holds in the tracker; 0 for none.
type stackTable struct {
	ids  map[string]uint32
	keys []string // by id
	buf  []byte   // the key being looked up, reused
}

// intern returns the id of the stack, adding it when it is new. The
// slices are not kept.
func (t *stackTable) intern(pid, image uint32, kern, user []uint64) uint32 {
	b := t.buf[:0]
	b = binary.LittleEndian.AppendUint32(b, pid)
	b = binary.LittleEndian.AppendUint32(b, image)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(kern)))
	for _, a := range kern {
		b = binary.LittleEndian.AppendUint64(b, a)
	}
	for _, a := range user {
		b = binary.LittleEndian.AppendUint64(b, a)
	}
	t.buf = b
	if id, ok := t.ids[string(b)]; ok { // a lookup by string(b) does not copy b
		return id
	}
	if t.ids == nil {
		t.ids = map[string]uint32{}
	}
	id := uint32(len(t.keys))
	k := string(b)
	t.ids[k] = id
	t.keys = append(t.keys, k)
	return id
}

// len returns the number of distinct stacks.
func (t *stackTable) len() int { return len(t.keys) }

// stack returns the process, image and frames of stack id. kern and user
// are decoded into *buf, which the next call reuses.
func (t *stackTable) stack(id uint32, buf *[]uint64) (pid, image uint32, kern, user []uint64) {
	k := t.keys[id]
	pid = uint32(le(k[0:4]))
	image = uint32(le(k[4:8]))
	nk := int(le(k[8:12]))
	all := (*buf)[:0]
	for i := 12; i+8 <= len(k); i += 8 {
		all = append(all, le(k[i:i+8]))
	}
	*buf = all
	return pid, image, all[:nk:nk], all[nk:]
}

// le decodes a little-endian number of up to 8 bytes.
func le(s string) uint64 {
	var v uint64
	for i := len(s) - 1; i >= 0; i-- {
		v = v<<8 | uint64(s[i])
	}
	return v
}

// names interns thread names: a few make up nearly all records.
type names struct {
	ids  map[string]uint32
	list []string // by id
}

func (n *names) intern(s string) uint32 {
	if id, ok := n.ids[s]; ok {
		return id
	}
	if n.ids == nil {
		n.ids = map[string]uint32{}
	}
	id := uint32(len(n.list))
	n.ids[s] = id
	n.list = append(n.list, s)
	return id
}
