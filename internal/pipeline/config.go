package pipeline

import (
	"fmt"

	"github.com/spanprof/spanprof/internal/debuginfod"
	"github.com/spanprof/spanprof/internal/gowait"
	"github.com/spanprof/spanprof/internal/sampler"
	"github.com/spanprof/spanprof/internal/symbolize"
)

// The names of the stages' options a command fills in Config, so that a
// command speaks to the pipeline alone.
type (
	// OffCPUOptions tune off-CPU sampling (sampler.OffCPUOptions).
	OffCPUOptions = sampler.OffCPUOptions
	// Mode says how far symbolization goes (symbolize.Mode).
	Mode = symbolize.Mode
)

// The symbolization modes (docs/symbolization.md).
const (
	ModeLocal = symbolize.ModeLocal
	ModeNone  = symbolize.ModeNone
	ModeFull  = symbolize.ModeFull
)

const (
	// DefaultOffCPUThreshold is the off-CPU sampling threshold both
	// commands default to; MaxOffCPUThreshold the largest the kernel
	// side takes.
	DefaultOffCPUThreshold = sampler.DefaultOffCPUThreshold
	MaxOffCPUThreshold     = sampler.MaxOffCPUThreshold
	// DefaultGoWaitFrequency is the goroutine-wait sampling frequency
	// both commands default to.
	DefaultGoWaitFrequency = gowait.DefaultFrequency
)

// ResolveMode turns a mode's name into a mode: empty means full when
// debuginfod servers are configured, else local.
func ResolveMode(name string, debuginfod bool) (Mode, error) {
	return symbolize.ResolveMode(name, debuginfod)
}

// DebuginfodURLs are the servers configured, else those of
// DEBUGINFOD_URLS.
func DebuginfodURLs(configured []string) []string {
	if len(configured) > 0 {
		return configured
	}
	return debuginfod.URLsFromEnv()
}

// Field names an option of Config in the errors of Validate; a command
// renames it to its flag or configuration key (FieldError.Rename).
type Field string

// The fields Validate checks.
const (
	FieldFrequency       Field = "frequency"
	FieldGoWaitFrequency Field = "go_wait_frequency"
	FieldOffCPUThreshold Field = "off_cpu_threshold"
	FieldCacheMiB        Field = "cache_mib"
	FieldRingMiB         Field = "ring_mib"
	FieldGCPercent       Field = "gc_percent"
	FieldLimitMiB        Field = "limit_mib"
)

// FieldError is a value of Config out of its range, said on one line:
// the command's name of the field, the value, and the problem ("out of
// range 1..100000", or after a colon what is wanted).
type FieldError struct {
	Field Field
	// Name is how the command's user knows the field; Field when empty.
	Name  string
	Value any
	// Problem follows the value: " out of range …", ": want …".
	Problem string
}

func (e *FieldError) Error() string {
	name := e.Name
	if name == "" {
		name = string(e.Field)
	}
	return fmt.Sprintf("%s %v%s", name, e.Value, e.Problem)
}

// Rename returns err with the field named as names has it (a flag, a
// configuration key); any other error as it is.
func Rename(err error, names map[Field]string) error {
	fe, ok := err.(*FieldError)
	if !ok {
		return err
	}
	if n, ok := names[fe.Field]; ok {
		c := *fe
		c.Name = n
		return &c
	}
	return err
}

// Validate checks what the kernel, the symbolizer and the Go runtime can
// take, and returns the first value out of range as a *FieldError.
// Record's flags and the agent's configuration are checked here alike.
// The GC percent is checked too: both commands set one (0 would leave
// GOGC as it is, which neither offers).
func (c *Config) Validate() error {
	bad := func(f Field, v any, problem string) error {
		return &FieldError{Field: f, Value: v, Problem: problem}
	}
	switch {
	case c.Frequency < 1 || c.Frequency > 100000:
		return bad(FieldFrequency, c.Frequency, " out of range 1..100000")
	case c.Budget.GCPercent < 10 || c.Budget.GCPercent > 1000:
		return bad(FieldGCPercent, c.Budget.GCPercent, " out of range 10..1000")
	case c.Budget.CacheMiB < 1:
		return bad(FieldCacheMiB, c.Budget.CacheMiB, ": want at least 1")
	case !validRing(c.Budget.RingMiB):
		return bad(FieldRingMiB, c.Budget.RingMiB, ": want a power of two from 2 to 1024")
	case c.Budget.LimitMiB < 0:
		return bad(FieldLimitMiB, c.Budget.LimitMiB, " is negative")
	case c.GoWaitFrequency < 0 || c.GoWaitFrequency > 1000:
		return bad(FieldGoWaitFrequency, c.GoWaitFrequency, " out of range 0..1000")
	case c.OffCPU.Threshold <= 0 || c.OffCPU.Threshold > MaxOffCPUThreshold:
		return bad(FieldOffCPUThreshold, c.OffCPU.Threshold, fmt.Sprintf(" out of range 1ns..%v", MaxOffCPUThreshold))
	}
	return nil
}

func validRing(r int) bool { return r >= 2 && r&(r-1) == 0 && r <= 1024 }
