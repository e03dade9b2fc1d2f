// Package profile holds the in-memory profile model that every exporter
// reads: symbolized samples with their thread, span link and wall-clock
// time, grouped by process.
package profile

import (
	"encoding/hex"
	"time"
)

// Kind tells which profile a sample belongs to.
type Kind uint8

const (
	// OnCPU samples count CPU-clock ticks; Value is 1 per event.
	OnCPU Kind = iota
	// OffCPU samples measure blocked time; Value is nanoseconds blocked.
	OffCPU
)

// String returns a short name for the kind.
func (k Kind) String() string {
	if k == OffCPU {
		return "off_cpu"
	}
	return "on_cpu"
}

// Link is the W3C trace context a sample was taken in. The zero Link means
// the thread was in no span.
type Link struct {
	TraceID [16]byte
	SpanID  [8]byte
}

// IsZero reports whether the link names no span.
func (l Link) IsZero() bool { return l == Link{} }

// TraceIDHex returns the lowercase hex trace id.
func (l Link) TraceIDHex() string { return hex.EncodeToString(l.TraceID[:]) }

// SpanIDHex returns the lowercase hex span id.
func (l Link) SpanIDHex() string { return hex.EncodeToString(l.SpanID[:]) }

// Mapping is one executable mapping a frame lies in.
type Mapping struct {
	Start, Limit, Offset uint64
	Path                 string
	// BuildID is the GNU build ID in lowercase hex; empty if the file has none.
	BuildID string
	// HTLHash is a content hash used as the file's identity when it has no
	// GNU build ID.
	HTLHash string
	// Kernel marks the kernel image or a module.
	Kernel bool
}

// Frame is one location of a stack, leaf first in Sample.Frames.
type Frame struct {
	// Address is the instruction address in the process (or kernel) space.
	Address uint64
	// Function is empty when the frame could not be symbolized; exporters
	// then show the mapping and offset.
	Function string
	File     string
	Line     int
	// Inlined marks a frame that was inlined into the next one in the stack.
	Inlined bool
	// NoSymbol marks a Function made from the module and the file offset
	// of the function's start in the unwind tables (.eh_frame), "gzip+0x4290":
	// no symbol or debug file named it, yet its samples aggregate as one
	// function. Address stays the exact instruction.
	NoSymbol bool
	Mapping  *Mapping
}

// Sample is one event: a tick of the CPU clock, or one blocked interval.
type Sample struct {
	Kind       Kind
	PID, TID   uint32
	ThreadName string
	CPU        uint32
	// Frames may be shared with other samples of the same stack (the
	// collector and the Go-wait sampler symbolize a stack once): read
	// them, never write or append to them in place.
	Frames []Frame
	Link   Link
	// Time is the event time in CLOCK_REALTIME.
	Time time.Time
	// Value is 1 for an on-CPU tick, nanoseconds blocked for off-CPU; it
	// may be larger when a sampled event stands for several.
	Value int64
	// State and Reason describe off-CPU samples ("S"/"D", wait function).
	State  string
	Reason string
	// Attrs are the thread context's attributes, exported as sample
	// attributes under their keys.
	Attrs Attrs
}

// Process describes a sampled process for resource attributes.
type Process struct {
	PID         uint32
	ExeName     string
	ExePath     string
	ServiceName string
	ContainerID string
	// Attributes holds further resource attributes (process context).
	Attributes map[string]string
}

// Profile is what one recording or one report interval produced.
type Profile struct {
	Start, End time.Time
	// Frequency is the on-CPU sampling frequency in Hz.
	Frequency int
	Processes map[uint32]*Process
	Samples   []Sample
	// Lost counts dropped events by reason, so outputs can show them.
	Lost map[string]uint64
}

// PeriodNanos is the on-CPU sampling period in nanoseconds.
func (p *Profile) PeriodNanos() int64 {
	if p.Frequency <= 0 {
		return 0
	}
	return int64(time.Second) / int64(p.Frequency)
}

// HasKind reports whether any sample is of kind k.
func (p *Profile) HasKind(k Kind) bool {
	for i := range p.Samples {
		if p.Samples[i].Kind == k {
			return true
		}
	}
	return false
}
