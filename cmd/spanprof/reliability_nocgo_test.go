//go:build !cgo

package main

func cgoEnabled() bool { return false }
