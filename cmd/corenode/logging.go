package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// etcd's levels above error.
const (
	levelPanic = slog.LevelError + 4
	levelFatal = slog.LevelError + 8
)

// zapTime is the timestamp etcd 3.6 writes (logutil.DefaultZapLoggerConfig):
// microseconds, and the zone as +0000.
const zapTime = "2006-01-02T15:04:05.000000Z0700"

// setDefaultLogger makes l the logger of everything that logs through
// slog.Default. slog.SetDefault also sends the log package's lines through
// l, as JSON; etcd leaves them as Go writes them, on stderr, and so does
// corenode: Go's own debug lines, such as GODEBUG=http2debug=2's
// `http2: decoded hpack field header field ":authority" = "..."` that
// etcd 3.7's TestAuthority reads from a member's output, keep Go's words.
func setDefaultLogger(l *slog.Logger) {
	slog.SetDefault(l)
	log.SetOutput(os.Stderr)
	log.SetFlags(log.LstdFlags)
}

// parseLevel takes etcd's level names.
func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	case "panic", "dpanic":
		return levelPanic, nil
	case "fatal":
		return levelFatal, nil
	}
	return 0, fmt.Errorf("--log-level %q: want debug, info, warn, error, panic or fatal", s)
}

func levelName(l slog.Level) string {
	switch {
	case l >= levelFatal:
		return "fatal"
	case l >= levelPanic:
		return "panic"
	case l >= slog.LevelError:
		return "error"
	case l >= slog.LevelWarn:
		return "warn"
	case l >= slog.LevelInfo:
		return "info"
	}
	return "debug"
}

// newLogger is a member's one logger, as etcd's --logger zap writes:
// format json (one object a line) or console, at level, to outputs
// (stderr, stdout or files, appended to). close closes the files.
func newLogger(logger, format, level string, outputs []string, rotate *rotation) (l *slog.Logger, closeFn func(), err error) {
	if logger != "zap" {
		return nil, nil, fmt.Errorf("--logger %q: only zap is supported, as in etcd 3.6", logger)
	}
	lv, err := parseLevel(level)
	if err != nil {
		return nil, nil, err
	}
	if format != "json" && format != "console" {
		return nil, nil, fmt.Errorf("--log-format %q: want json or console", format)
	}
	var ws []io.Writer
	var files []io.Closer
	closeFn = func() {
		for _, f := range files {
			f.Close()
		}
	}
	if rotate != nil {
		// As etcd: rotation is for one file, nothing else.
		if len(outputs) != 1 || slices.Contains([]string{"stderr", "stdout", "default", "journal", "journald", "/dev/null"}, outputs[0]) {
			return nil, nil, errors.New("--enable-log-rotation needs exactly one --log-outputs, a file")
		}
		f, err := openRotating(outputs[0], *rotate)
		if err != nil {
			return nil, nil, fmt.Errorf("--log-outputs: %w", err)
		}
		return slog.New(newZapHandler(f, format == "console", lv)), func() { f.Close() }, nil
	}
	seen := map[string]bool{}
	for _, out := range outputs {
		if seen[out] {
			continue
		}
		seen[out] = true
		switch out {
		case "stderr", "default", "journal", "journald":
			// journald gets what systemd captures of stderr.
			ws = append(ws, os.Stderr)
		case "stdout":
			ws = append(ws, os.Stdout)
		case "/dev/null":
			ws = append(ws, io.Discard)
		default:
			f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				closeFn()
				return nil, nil, fmt.Errorf("--log-outputs: %w", err)
			}
			files = append(files, f)
			ws = append(ws, f)
		}
	}
	if len(ws) == 0 {
		ws = append(ws, os.Stderr)
	}
	w := ws[0]
	if len(ws) > 1 {
		w = io.MultiWriter(ws...)
	}
	return slog.New(newZapHandler(w, format == "console", lv)), closeFn, nil
}

// zapHandler writes records as etcd's zap encoder does: for json,
// {"level":"info","ts":"...","caller":"dir/file.go:12","msg":"...",fields}; for
// console, ts, level, caller and msg tab-separated, then the fields as JSON.
// The fields are slog's JSON handler's, written into a buffer and spliced.
type zapHandler struct {
	inner   slog.Handler // writes the fields (and, for json, msg) into buf
	buf     *bytes.Buffer
	mu      *sync.Mutex
	w       io.Writer
	level   slog.Level
	console bool
}

func newZapHandler(w io.Writer, console bool, level slog.Level) *zapHandler {
	h := &zapHandler{buf: new(bytes.Buffer), mu: new(sync.Mutex), w: w, level: level, console: console}
	h.inner = slog.NewJSONHandler(h.buf, &slog.HandlerOptions{
		Level: slog.Level(-100), // h decides
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 {
				switch a.Key {
				case slog.TimeKey, slog.LevelKey:
					return slog.Attr{}
				case slog.MessageKey:
					if console {
						return slog.Attr{}
					}
					return a
				}
			}
			switch v := a.Value.Any().(type) {
			case time.Duration:
				// zap's StringDurationEncoder, as etcd's config.
				return slog.String(a.Key, v.String())
			case time.Time:
				return slog.String(a.Key, v.Format(zapTime))
			}
			return a
		},
	})
	return h
}

func (h *zapHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *zapHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.inner = h.inner.WithAttrs(as)
	return &c
}

func (h *zapHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.inner = h.inner.WithGroup(name)
	return &c
}

func (h *zapHandler) Handle(ctx context.Context, r slog.Record) error {
	var line bytes.Buffer
	ts := r.Time.Format(zapTime)
	caller := callerOf(r.PC)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf.Reset()
	if err := h.inner.Handle(ctx, r); err != nil {
		return err
	}
	fields := bytes.TrimRight(h.buf.Bytes(), "\n")
	if h.console {
		line.WriteString(ts + "\t" + levelName(r.Level) + "\t")
		if caller != "" {
			line.WriteString(caller + "\t")
		}
		line.WriteString(r.Message)
		if len(fields) > 2 {
			line.WriteByte('\t')
			line.Write(fields)
		}
	} else {
		line.WriteString(`{"level":` + strconv.Quote(levelName(r.Level)) + `,"ts":"` + ts + `"`)
		if caller != "" {
			line.WriteString(`,"caller":` + strconv.Quote(caller))
		}
		if len(fields) < 2 || fields[0] != '{' {
			return errors.New("log: the JSON handler wrote no object")
		}
		line.WriteByte(',')
		line.Write(fields[1:])
	}
	line.WriteByte('\n')
	_, err := h.w.Write(line.Bytes())
	return err
}

// callerOf is zap's short caller: the file's directory and name, and the line.
func callerOf(pc uintptr) string {
	if pc == 0 {
		return ""
	}
	f, _ := runtime.CallersFrames([]uintptr{pc}).Next()
	if f.File == "" {
		return ""
	}
	return filepath.Base(filepath.Dir(f.File)) + "/" + filepath.Base(f.File) + ":" + strconv.Itoa(f.Line)
}

// grpcLogger is gRPC's logger over the member's, so gRPC's lines are in
// the member's one format too. As etcd sets gRPC's logger, only errors
// show at the usual levels; gRPC's info and warnings at debug.
type grpcLogger struct{ l *slog.Logger }

func (g grpcLogger) log(level slog.Level, msg string) {
	g.l.Log(context.Background(), level, strings.TrimSpace(msg), "logger", "grpc")
}

func (g grpcLogger) Info(args ...any)   { g.log(slog.LevelDebug, fmt.Sprint(args...)) }
func (g grpcLogger) Infoln(args ...any) { g.log(slog.LevelDebug, fmt.Sprintln(args...)) }
func (g grpcLogger) Infof(format string, args ...any) {
	g.log(slog.LevelDebug, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Warning(args ...any)   { g.log(slog.LevelDebug, fmt.Sprint(args...)) }
func (g grpcLogger) Warningln(args ...any) { g.log(slog.LevelDebug, fmt.Sprintln(args...)) }
func (g grpcLogger) Warningf(format string, args ...any) {
	g.log(slog.LevelDebug, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Error(args ...any)   { g.log(slog.LevelError, fmt.Sprint(args...)) }
func (g grpcLogger) Errorln(args ...any) { g.log(slog.LevelError, fmt.Sprintln(args...)) }
func (g grpcLogger) Errorf(format string, args ...any) {
	g.log(slog.LevelError, fmt.Sprintf(format, args...))
}
func (g grpcLogger) Fatal(args ...any)   { g.log(levelFatal, fmt.Sprint(args...)); os.Exit(1) }
func (g grpcLogger) Fatalln(args ...any) { g.log(levelFatal, fmt.Sprintln(args...)); os.Exit(1) }
func (g grpcLogger) Fatalf(format string, args ...any) {
	g.log(levelFatal, fmt.Sprintf(format, args...))
	os.Exit(1)
}

// V reports whether gRPC's verbose lines (level l) are wanted: at debug.
func (g grpcLogger) V(l int) bool {
	return l <= 0 && g.l.Enabled(context.Background(), slog.LevelDebug)
}
