package kcpenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/opendefensecloud/dependency-controller/internal/kcpversion"
)

// BinDirEnv names the environment variable with the directory of the kcp
// binaries (kcp, kcp-front-proxy, cache-server, sharded-test-server) that
// every suite starting kcp uses: the envtest suites, the contract suite,
// the e2e suite, `make measure`, the soak and `make run-local`. Unset, it
// is bin/ of the repository, which `make kcp` fills with the pinned build.
const BinDirEnv = "KCP_BIN_DIR"

// BinDir returns the directory of the kcp binaries (see BinDirEnv).
func BinDir() string {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return dir
	}
	return filepath.Join(RepoRoot(), "bin")
}

// CheckBinaries checks that dir holds every binary named, asks its kcp for
// its version (`kcp --version`) and writes to w which kcp it is using,
// and whether this release was tested with it. A missing binary is an
// error that says how to get it; a version outside the tested range is
// not (the point of BinDirEnv is to run the suites against other builds).
func CheckBinaries(w io.Writer, dir string, names ...string) (kcpversion.Info, error) {
	for _, name := range names {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return kcpversion.Info{}, fmt.Errorf("%s not found in %s: run `make kcp` to build the pinned kcp into bin/, or set %s to a directory with your kcp build: %w", name, dir, BinDirEnv, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "kcp"), "--version").Output()
	if err != nil {
		return kcpversion.Info{}, fmt.Errorf("failed to ask %s for its version: %w", filepath.Join(dir, "kcp"), err)
	}
	// "kcp version v1.35.1+kcp-v0.31.2"
	fields := strings.Fields(string(out))
	if len(fields) == 0 {
		return kcpversion.Info{}, fmt.Errorf("%s --version printed nothing", filepath.Join(dir, "kcp"))
	}
	info := kcpversion.Parse(fields[len(fields)-1])
	_, _ = fmt.Fprintf(w, "Using kcp %s (%s) from %s: %s\n", info.KCP, info.GitVersion, dir, info.Describe())
	return info, nil
}
