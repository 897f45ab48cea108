package helmchart

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// WriteSecretVolume writes the content of a Secret (key -> content) into
// dir the way the kubelet projects a Secret volume without items, so that a
// binary run on local files sees what it sees in a pod: the files live in a
// hidden, timestamped directory that the symbolic link ..data points at,
// and every key is a symbolic link ..data/<key>. Called again on the same
// directory, it swaps the content atomically, as the kubelet does when the
// Secret changes: keys that are gone disappear, new ones appear.
func WriteSecretVolume(dir string, data map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for key := range data {
		if key == "" || strings.HasPrefix(key, "..") || strings.ContainsAny(key, `/\`) {
			return fmt.Errorf("%q is not a key a Secret volume can project", key)
		}
	}
	ts, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return err
	}
	for key, content := range data {
		if err := os.WriteFile(filepath.Join(ts, key), content, 0o600); err != nil {
			return err
		}
	}
	link := filepath.Join(dir, "..data")
	previous, err := os.Readlink(link)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, link); err != nil {
		return err
	}
	for key := range data {
		if err := os.Symlink(filepath.Join("..data", key), filepath.Join(dir, key)); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if _, keep := data[e.Name()]; keep || strings.HasPrefix(e.Name(), "..") || e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	if strings.HasPrefix(previous, "..") && !strings.ContainsAny(previous, `/\`) && previous != filepath.Base(ts) {
		return os.RemoveAll(filepath.Join(dir, previous))
	}
	return nil
}
