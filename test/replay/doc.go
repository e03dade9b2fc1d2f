// Package replay replays recorded kernel event streams through the
// pipeline without root, and compares the folded stacks it builds with
// the expected ones (testdata/replay). A case is what the real sampler
// sent for a running fixture (C, Go, a JVM, CPython), the maps of its
// processes, their JIT perf maps, the kernel symbols its kernel stacks
// run through and the ELF objects its stacks run in, cut down to what
// unwinding and symbolization read: unwinding and symbolization
// regressions show in `make unit`, without root or a compiler.
//
//	go test ./test/replay                      # replay, compare
//	sudo go test ./test/replay -update         # record every case again
//	sudo go test ./test/replay -update -run 'TestReplay/go'
//
// The tests are in the _test.go files; this file holds the package's
// documentation.
package replay
