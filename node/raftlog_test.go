package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestRaftLinesGoThroughSlog checks hashicorp's lines reach the member's
// logger as its own records: warnings always, info only at debug, and
// values rendered as hclog would.
func TestRaftLinesGoThroughSlog(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var b bytes.Buffer
		l := newSlogHCLog(slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{Level: level, AddSource: true})), "raft")
		l.Info("entering follower state", "term", 2)
		l.Named("wal").With("segment", 3).Warn("slow", "servers", hclog.Fmt("%d servers", 3), "error", errors.New("boom"))
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		if want := map[slog.Level]int{slog.LevelInfo: 1, slog.LevelDebug: 2}[level]; len(lines) != want {
			t.Fatalf("at %v: %d lines, want %d:\n%s", level, len(lines), want, b.String())
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); err != nil {
			t.Fatal(err)
		}
		src, _ := rec["source"].(map[string]any)
		if rec["msg"] != "slow" || rec["level"] != "WARN" || rec["logger"] != "raft.wal" || rec["segment"] != 3.0 ||
			rec["servers"] != "3 servers" || rec["error"] != "boom" || !strings.HasSuffix(src["file"].(string), "raftlog_test.go") {
			t.Errorf("record %s", lines[len(lines)-1])
		}
		if l.IsDebug() != (level == slog.LevelDebug) || !l.IsWarn() {
			t.Errorf("at %v: IsDebug %v IsWarn %v", level, l.IsDebug(), l.IsWarn())
		}
	}
}
