// Command goprog is the Go fixture of the symbolizer tests: a known call
// chain main.alpha -> main.beta -> main.gamma, symbolized from plain,
// stripped and PIE builds.
package main

import (
	"fmt"
	"io"
	"os"
	"reflect"
)

var sink uint64

//go:noinline
func gamma(n uint64) uint64 {
	x := n
	for i := 0; i < 1000; i++ {
		x = x*2862933555777941757 + 3037000493
	}
	return x
}

//go:noinline
func beta(n uint64) uint64 { return gamma(n) + 1 }

//go:noinline
func alpha(n uint64) uint64 { return beta(n) + 2 }

// With "addrs" the program prints its function entry addresses and waits
// for stdin to close, so a test can symbolize it as a live process.
func main() {
	if len(os.Args) > 1 && os.Args[1] == "addrs" {
		for _, f := range []struct {
			name string
			fn   any
		}{{"main.alpha", alpha}, {"main.beta", beta}, {"main.gamma", gamma}} {
			fmt.Printf("%s %#x\n", f.name, reflect.ValueOf(f.fn).Pointer())
		}
		io.Copy(io.Discard, os.Stdin)
		return
	}
	for i := uint64(0); i < 1000; i++ {
		sink += alpha(i)
	}
}
