package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Unavailable stops t because why (say what is missing and how to get it).
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true, so this is a failure, not a skip)", why)
	}
	t.Skip(why)
}

// RequireCommand stops t unless name is on PATH; install says how to get it.
func RequireCommand(t testing.TB, name, install string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		Unavailable(t, name+" is not on PATH: "+install)
	}
}
