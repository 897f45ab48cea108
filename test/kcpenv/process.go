package kcpenv

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Process is a binary (kcp, or one of the project's) running as a separate
// process in its own process group, with its output in a log file.
type Process struct {
	Name    string
	Binary  string
	Args    []string
	LogPath string
	// HealthAddr is its health-probe address (host:port).
	HealthAddr string
	// Dir is the working directory; empty means the current one.
	Dir string
	// Env is added to the environment of the current process.
	Env []string

	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts the process; its output is appended to LogPath.
func (p *Process) Start() error {
	if _, err := os.Stat(p.Binary); err != nil {
		return fmt.Errorf("%s not found (run `make build kcp`): %w", p.Binary, err)
	}
	log, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "\n===== %s %s %s\n", time.Now().Format(time.RFC3339), p.Binary, strings.Join(p.Args, " "))
	p.cmd = exec.Command(p.Binary, p.Args...)
	p.cmd.Dir = p.Dir
	if len(p.Env) > 0 {
		p.cmd.Env = append(os.Environ(), p.Env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("failed to start %s: %w", p.Name, err)
	}
	p.done = make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		_ = log.Close()
		close(p.done)
	}()
	return nil
}

// Running reports whether the process has been started and not exited.
func (p *Process) Running() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM to the process and everything it started, and waits
// until all of them have exited (sending SIGKILL after 30 seconds), so that
// their ports are free again.
func (p *Process) Stop() {
	if !p.Running() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	deadline := time.After(30 * time.Second)
	select {
	case <-p.done:
	case <-deadline:
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	p.waitGroupGone(deadline)
}

// Kill sends SIGKILL to the process and everything it started, as a crash or
// an OOM kill would, and waits until all of them have exited.
func (p *Process) Kill() {
	if !p.Running() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	p.waitGroupGone(time.After(30 * time.Second))
}

// waitGroupGone waits until no process of the process group is left,
// killing what is left when deadline passes, and gives up 10 seconds later
// (processes that nobody reaps stay as zombies, which hold no ports).
func (p *Process) waitGroupGone(deadline <-chan time.Time) {
	var giveUp <-chan time.Time
	for syscall.Kill(-p.cmd.Process.Pid, 0) == nil {
		select {
		case <-deadline:
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			deadline, giveUp = nil, time.After(10*time.Second)
		case <-giveUp:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Pid returns the process ID of a started process.
func (p *Process) Pid() int {
	return p.cmd.Process.Pid
}

// Done is closed when the process exits.
func (p *Process) Done() <-chan struct{} {
	return p.done
}

// Ready returns nil if the process answers 200 on http://HealthAddr/readyz.
func (p *Process) Ready() error {
	if !p.Running() {
		return fmt.Errorf("%s is not running; log:\n%s", p.Name, p.LogTail(30))
	}
	resp, err := http.Get("http://" + p.HealthAddr + "/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s /readyz: %s", p.Name, resp.Status)
	}
	return nil
}

// LogTail returns the last n lines of the log.
func (p *Process) LogTail(n int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
