package main

import (
	"bytes"
	"log"
	"log/slog"
	"os"
	"strings"
	"testing"
)

// TestStdLogStaysGos: the log package's lines go to stderr as Go writes
// them, not through corenode's JSON logger, as etcd leaves them. etcd
// 3.7's TestAuthority looks for GODEBUG=http2debug=2's line
// `http2: decoded hpack field header field ":authority" = "HOST:PORT"`
// at the end of a line of a member's output; inside a JSON string its
// quotes were escaped and the test found no such line.
func TestStdLogStaysGos(t *testing.T) {
	prevSlog, prevOut, prevFlags := slog.Default(), log.Writer(), log.Flags()
	t.Cleanup(func() {
		slog.SetDefault(prevSlog)
		log.SetOutput(prevOut)
		log.SetFlags(prevFlags)
	})
	var ours bytes.Buffer
	setDefaultLogger(slog.New(newZapHandler(&ours, false, slog.LevelInfo)))
	if log.Writer() != os.Stderr {
		t.Errorf("the log package writes to %T, not to stderr", log.Writer())
	}
	if log.Flags() != log.LstdFlags {
		t.Errorf("the log package's flags are %d, not Go's %d", log.Flags(), log.LstdFlags)
	}
	// Where the line goes, with stderr caught.
	var gos bytes.Buffer
	log.SetOutput(&gos)
	log.Printf("http2: decoded hpack field %s", `header field ":authority" = "localhost:20000"`)
	want := `http2: decoded hpack field header field ":authority" = "localhost:20000"`
	if line := strings.TrimSuffix(gos.String(), "\n"); !strings.HasSuffix(line, want) {
		t.Errorf("the log package wrote %q, want a line ending in %q", gos.String(), want)
	}
	if ours.Len() != 0 {
		t.Errorf("the log package's line went to corenode's logger: %s", ours.String())
	}
	slog.Info("corenode's own")
	if !strings.Contains(ours.String(), `"msg":"corenode's own"`) {
		t.Errorf("slog.Default does not log through corenode's logger: %q", ours.String())
	}
}
