//go:build cgotls

package main

// Thread-local C variables in the executable move the Go runtime's g slot
// away from fsbase-8 when the external linker lays out the TLS block: the
// cgo build of this fixture checks that GoOffsets finds it.

/*
__thread long fixture_tls_words[5] = {1, 2, 3, 4, 5};
__thread char fixture_tls_byte;
static long fixture_touch_tls(void) { fixture_tls_byte++; return fixture_tls_words[1]++; }
*/
import "C"

func init() { _ = C.fixture_touch_tls() }
