package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestUnavailableFailsInCI runs a test that needs a missing command, once
// as CI and once not, in a child process: in CI it must fail, elsewhere skip.
func TestUnavailableFailsInCI(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		RequireCommand(t, "corenode-no-such-command", "it does not exist")
		t.Fatal("RequireCommand returned for a missing command")
	}
	for _, ci := range []string{"true", ""} {
		cmd := exec.Command(os.Args[0], "-test.run=TestUnavailableFailsInCI", "-test.v")
		cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", "CI="+ci)
		out, err := cmd.CombinedOutput()
		failed := err != nil
		skipped := strings.Contains(string(out), "--- SKIP")
		if ci == "true" && (!failed || !strings.Contains(string(out), "CI=true, so this is a failure")) {
			t.Errorf("CI=true: want a failure, got err=%v:\n%s", err, out)
		}
		if ci == "" && (failed || !skipped) {
			t.Errorf("outside CI: want a skip, got err=%v:\n%s", err, out)
		}
	}
}
