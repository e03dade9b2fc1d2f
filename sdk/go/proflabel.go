package spanprof

import (
	"unsafe"

	_ "runtime/pprof" // provides the runtime_getProfLabel symbol below
)

// getProfLabel returns the calling goroutine's label pointer (g.labels), the
// value runtime/pprof.SetGoroutineLabels stores. runtime/pprof has no public
// getter; the runtime keeps this linkname stable on purpose ("Do not remove
// or change the type signature", go.dev/issue/67401). The SDK uses it only
// to compare pointers, so that End restores exactly what Start replaced and
// never touches a goroutine whose labels someone else has changed since.
//
//go:linkname getProfLabel runtime/pprof.runtime_getProfLabel
func getProfLabel() unsafe.Pointer

// setProfLabel stores a label pointer previously returned by getProfLabel
// back into g.labels. It is the same runtime entry point
// pprof.SetGoroutineLabels uses; going through it directly lets End restore
// a parent's labels without rebuilding a context.
//
//go:linkname setProfLabel runtime/pprof.runtime_setProfLabel
func setProfLabel(labels unsafe.Pointer)
