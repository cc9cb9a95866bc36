//go:build !unix

package freeport

// lock has no cross-process lock to take here; the bind probe alone guards.
func lock(port int) bool { return true }
