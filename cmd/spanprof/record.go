package main

import (
	"context"
	"fmt"
	"io"
)

func runRecord(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "spanprof record: not built yet")
	return 1
}
