//go:build cgo

package main

func cgoEnabled() bool { return true }
