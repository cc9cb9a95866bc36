// Package testenv holds the project's one rule for a test that cannot run
// on this machine: it skips on a developer's machine, and fails in CI
// (CI=true), where a skip would let a build pass without the test having
// run. scripts/test installs what the tests need, so in CI a missing tool is
// a broken set-up, not a reason to pass.
//
// Its contract: Unavailable ends the test it is given, with t.Skip or, in
// CI, t.Fatalf, so it never returns and, as testing requires, must be
// called from the test's own goroutine. RequireCommand applies the rule to
// a program that must be on PATH. A test that needs something this
// machine may lack asks here rather than deciding for itself, so the rule
// holds everywhere.
//
// Where it sits: test support, internal to this module. It imports only
// os, os/exec and testing, and must never be imported by code that ships.
package testenv
