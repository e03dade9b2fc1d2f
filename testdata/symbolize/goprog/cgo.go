//go:build withcgo

package main

// With the withcgo tag the fixture links C code (runtime/cgo and this
// function) before runtime.text, as every cgo binary does: its function
// table is relative to runtime.text, not to the start of .text.

// static int cgo_marker(void) { return 1; }
import "C"

var _ = C.cgo_marker
