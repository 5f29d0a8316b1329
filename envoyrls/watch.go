package envoyrls

import (
	"context"
	"crypto/sha256"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Watch loads the configuration at path (a file, or a directory of
// files, as LoadConfig reads them), and then, until ctx ends, reads it
// again every interval and loads it when its content has changed: an
// edit in place, a new file, or a symbolic link swapped for another (a
// Kubernetes ConfigMap's way) alike. The first load's error is returned,
// and nothing watches then. A later configuration that does not load
// leaves the one loaded before deciding, and the log says why, once for
// each content that fails; the counts carry on across loads (see Load).
func (s *Server) Watch(ctx context.Context, path string, interval time.Duration) error {
	if interval <= 0 {
		return errors.New("envoyrls: Watch: the interval must be positive")
	}
	sum, err := fingerprint(path)
	if err == nil {
		err = s.loadPath(path)
	}
	if err != nil {
		return err
	}
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			now, err := fingerprint(path)
			if err == nil && now == sum {
				continue
			}
			if err == nil {
				sum = now
				err = s.loadPath(path)
			} else {
				sum = [sha256.Size]byte{} // read again, and say so, once it reads
			}
			if err != nil {
				s.opts.Logger.Error("envoyrls: the configuration does not load; the one loaded before keeps deciding",
					slog.String("path", path), slog.Any("err", err))
				continue
			}
			s.opts.Logger.Info("envoyrls: configuration loaded", slog.String("path", path))
		}
	}()
	return nil
}

// loadPath loads the configuration at path.
func (s *Server) loadPath(path string) error {
	cfgs, err := LoadConfig(path)
	if err != nil {
		return err
	}
	return s.Load(cfgs)
}

// fingerprint is a digest of what LoadConfig reads at path: the names
// and contents of its files.
func fingerprint(path string) (sum [sha256.Size]byte, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return sum, err
	}
	files := []string{path}
	if fi.IsDir() {
		files = files[:0]
		entries, err := os.ReadDir(path)
		if err != nil {
			return sum, err
		}
		for _, e := range entries {
			files = append(files, filepath.Join(path, e.Name()))
		}
		sort.Strings(files)
	}
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue // gone since the listing: the next reading sees it
		}
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) && isDir(f) {
				continue // LoadConfig reads no directory within
			}
			return sum, err
		}
		h.Write([]byte(f))
		h.Write([]byte{0})
		h.Write(b)
		h.Write([]byte{0})
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// isDir reports whether path is a directory.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
