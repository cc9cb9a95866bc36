package main

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// rotation is etcd's --log-rotation-config-json, lumberjack's settings.
type rotation struct {
	MaxSize    int  `json:"maxsize"`    // MB a file may reach; 0: 100
	MaxAge     int  `json:"maxage"`     // days a rotated file is kept; 0: no limit
	MaxBackups int  `json:"maxbackups"` // rotated files kept; 0: no limit
	LocalTime  bool `json:"localtime"`  // name them in local time, not UTC
	Compress   bool `json:"compress"`   // gzip them
}

func parseRotation(js string) (rotation, error) {
	var r rotation
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		return r, fmt.Errorf("--log-rotation-config-json: %w", err)
	}
	if r.MaxSize < 0 || r.MaxAge < 0 || r.MaxBackups < 0 {
		return r, errors.New("--log-rotation-config-json: negative values")
	}
	if r.MaxSize == 0 {
		r.MaxSize = 100
	}
	return r, nil
}

// rotatingFile is a log file that, past MaxSize, is renamed as lumberjack
// (and so etcd) names its backups, NAME-2006-01-02T15-04-05.000.EXT, and
// started afresh; old backups are removed by count and age.
type rotatingFile struct {
	path string
	cfg  rotation
	mu   sync.Mutex
	f    *os.File
	size int64
	wg   sync.WaitGroup // compressions under way
}

const backupTime = "2006-01-02T15-04-05.000"

func openRotating(path string, cfg rotation) (*rotatingFile, error) {
	r := &rotatingFile{path: path, cfg: cfg}
	if err := r.open(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *rotatingFile) open() error {
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	r.f, r.size = f, st.Size()
	return nil
}

func (r *rotatingFile) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.size > 0 && r.size+int64(len(p)) > int64(r.cfg.MaxSize)<<20 {
		if err := r.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

func (r *rotatingFile) rotate() error {
	if err := r.f.Close(); err != nil {
		return err
	}
	now := time.Now()
	if !r.cfg.LocalTime {
		now = now.UTC()
	}
	ext := filepath.Ext(r.path)
	backup := strings.TrimSuffix(r.path, ext) + "-" + now.Format(backupTime) + ext
	if err := os.Rename(r.path, backup); err != nil {
		return err
	}
	if err := r.open(); err != nil {
		return err
	}
	if r.cfg.Compress {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if gzipFile(backup) == nil {
				r.prune()
			}
		}()
	} else {
		r.prune()
	}
	return nil
}

// prune removes backups past MaxBackups (oldest first) or older than MaxAge.
func (r *rotatingFile) prune() {
	ext := filepath.Ext(r.path)
	prefix := filepath.Base(strings.TrimSuffix(r.path, ext)) + "-"
	entries, err := os.ReadDir(filepath.Dir(r.path))
	if err != nil {
		return
	}
	type backup struct {
		name string
		at   time.Time
	}
	var bs []backup
	for _, e := range entries {
		n := e.Name()
		stamp, ok := strings.CutPrefix(n, prefix)
		if !ok {
			continue
		}
		stamp = strings.TrimSuffix(strings.TrimSuffix(stamp, ".gz"), ext)
		if at, err := time.Parse(backupTime, stamp); err == nil {
			bs = append(bs, backup{n, at})
		}
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].at.After(bs[j].at) })
	for i, b := range bs {
		old := r.cfg.MaxAge > 0 && time.Since(b.at) > time.Duration(r.cfg.MaxAge)*24*time.Hour
		if (r.cfg.MaxBackups > 0 && i >= r.cfg.MaxBackups) || old {
			os.Remove(filepath.Join(filepath.Dir(r.path), b.name))
		}
	}
}

func gzipFile(path string) error {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(path+".gz", os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(out)
	if _, err := io.Copy(zw, in); err != nil {
		out.Close()
		return err
	}
	if err := zw.Close(); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Remove(path)
}

func (r *rotatingFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wg.Wait()
	return r.f.Close()
}
