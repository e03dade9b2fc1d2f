package tracectx

import (
	"os/exec"
	"testing"
)

// TestCSDK runs the C++ check of sdk/c/otel_thread_ctx.h (nesting, overflow,
// attribute bounds, process context) built with g++ and clang++.
func TestCSDK(t *testing.T) {
	for _, bin := range []string{"sdk-check-gxx", "sdk-check-clangxx"} {
		t.Run(bin, func(t *testing.T) {
			out, err := exec.Command(fixture(t, bin)).CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}
