package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/corenode/corenode/server"
)

// version is set at build time with -ldflags "-X main.version=..."; the
// build info Go records wins when it knows more than "(devel)".
var version = "dev"

// buildVersion is the module version and VCS revision of this binary.
func buildVersion() (ver, rev string) {
	ver, rev = version, "unknown"
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ver, rev
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		ver = v
	}
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified {
		rev += "-dirty"
	}
	return ver, rev
}

// printVersion writes corenode's version, then etcd's --version lines
// with the etcd API version corenode serves, which etcd's test harnesses
// parse ("etcd Version: X").
func printVersion(w io.Writer) {
	ver, rev := buildVersion()
	fmt.Fprintf(w, "corenode Version: %s (%s)\n", ver, rev)
	fmt.Fprintf(w, "etcd Version: %s\n", server.APIVersion)
	fmt.Fprintf(w, "Git SHA: %s\n", rev)
	fmt.Fprintf(w, "Go Version: %s\n", runtime.Version())
	fmt.Fprintf(w, "Go OS/Arch: %s/%s\n", runtime.GOOS, runtime.GOARCH)
}
