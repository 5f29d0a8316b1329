package envoyrls

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// Watch loads the configuration at path (a file, or a directory of
// files, as LoadConfig reads them), and then, until ctx ends, reads it
// again every interval and loads it when its content has changed: an
// edit in place, a new file, or a symbolic link swapped for another (a
// Kubernetes ConfigMap's way) alike. The first load's error is returned,
// and nothing watches then. A later configuration that does not load, or
// a path that cannot be read, leaves the one loaded before deciding, and
// the log says why, once for each error; the counts carry on across loads
// (see Load).
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
		failed := "" // the failure logged last, said once
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
			}
			if err != nil {
				if err.Error() != failed {
					failed = err.Error()
					s.opts.Logger.Error("envoyrls: the configuration does not load; the one loaded before keeps deciding",
						slog.String("path", path), slog.Any("err", err))
				}
				continue
			}
			failed = ""
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
	files, err := configFiles(path)
	if err != nil {
		return sum, err
	}
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return sum, fmt.Errorf("envoyrls: %w", err)
		}
		h.Write([]byte(f))
		h.Write([]byte{0})
		h.Write(b)
		h.Write([]byte{0})
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}
