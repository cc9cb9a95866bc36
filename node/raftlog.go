package node

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// slogHCLog is an hclog.Logger that writes through a slog.Logger, so
// hashicorp's libraries (raft, raft-wal) log in the member's one format
// rather than hclog's own text lines. Their warnings and errors always
// pass; their info, debug and trace lines (every state change and
// replication detail) only when the logger is at debug, which keeps a
// member at info as quiet as it was with hclog at warn.
type slogHCLog struct {
	l    *slog.Logger
	name string
	args []any
}

func newSlogHCLog(l *slog.Logger, name string) hclog.Logger {
	return &slogHCLog{l: l, name: name}
}

func (h *slogHCLog) level(lv hclog.Level) slog.Level {
	switch lv {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug, hclog.Info:
		// Kept below info: see the type's comment.
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	}
	return slog.LevelError
}

func (h *slogHCLog) Log(lv hclog.Level, msg string, args ...any) { h.log(lv, msg, args) }
func (h *slogHCLog) Trace(msg string, args ...any)               { h.log(hclog.Trace, msg, args) }
func (h *slogHCLog) Debug(msg string, args ...any)               { h.log(hclog.Debug, msg, args) }
func (h *slogHCLog) Info(msg string, args ...any)                { h.log(hclog.Info, msg, args) }
func (h *slogHCLog) Warn(msg string, args ...any)                { h.log(hclog.Warn, msg, args) }
func (h *slogHCLog) Error(msg string, args ...any)               { h.log(hclog.Error, msg, args) }

func (h *slogHCLog) log(lv hclog.Level, msg string, args []any) {
	level := h.level(lv)
	ctx := context.Background()
	if !h.l.Enabled(ctx, level) {
		return
	}
	// The caller is the library's line, not this adapter's.
	var pcs [1]uintptr
	runtime.Callers(3, pcs[:])
	r := slog.NewRecord(time.Now(), level, msg, pcs[0])
	r.Add("logger", h.name)
	r.Add(hclogValues(h.args)...)
	r.Add(hclogValues(args)...)
	_ = h.l.Handler().Handle(ctx, r)
}

// hclogValues renders the values as hclog would: hclog.Fmt's format, a
// Stringer's or an error's text (raft passes its own types, which JSON
// would show as {}).
func hclogValues(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		if i%2 == 0 {
			out[i] = a
			continue
		}
		switch v := a.(type) {
		case hclog.Format:
			if len(v) > 0 {
				if f, ok := v[0].(string); ok {
					a = fmt.Sprintf(f, v[1:]...)
				}
			}
		case error:
			a = v.Error()
		case fmt.Stringer:
			a = v.String()
		}
		out[i] = a
	}
	return out
}

func (h *slogHCLog) IsTrace() bool { return h.l.Enabled(context.Background(), h.level(hclog.Trace)) }
func (h *slogHCLog) IsDebug() bool { return h.l.Enabled(context.Background(), h.level(hclog.Debug)) }
func (h *slogHCLog) IsInfo() bool  { return h.l.Enabled(context.Background(), h.level(hclog.Info)) }
func (h *slogHCLog) IsWarn() bool  { return h.l.Enabled(context.Background(), h.level(hclog.Warn)) }
func (h *slogHCLog) IsError() bool { return h.l.Enabled(context.Background(), h.level(hclog.Error)) }

func (h *slogHCLog) ImpliedArgs() []any { return h.args }

func (h *slogHCLog) With(args ...any) hclog.Logger {
	c := *h
	c.args = append(append([]any(nil), h.args...), args...)
	return &c
}

func (h *slogHCLog) Name() string { return h.name }

func (h *slogHCLog) Named(name string) hclog.Logger {
	c := *h
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

func (h *slogHCLog) ResetNamed(name string) hclog.Logger {
	c := *h
	c.name = name
	return &c
}

// SetLevel does nothing: the slog logger's level decides.
func (h *slogHCLog) SetLevel(hclog.Level) {}

func (h *slogHCLog) GetLevel() hclog.Level {
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Warn} {
		if h.l.Enabled(context.Background(), h.level(lv)) {
			return lv
		}
	}
	return hclog.Error
}

func (h *slogHCLog) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *slogHCLog) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return stdWriter{h}
}

// stdWriter is for libraries that take a *log.Logger: each line a warning.
type stdWriter struct{ h *slogHCLog }

func (w stdWriter) Write(p []byte) (int, error) {
	w.h.log(hclog.Warn, strings.TrimRight(string(p), "\n"), nil)
	return len(p), nil
}
