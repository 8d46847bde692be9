//go:build linux

package badgerstore_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// powerLossWriter is the writer child, seen from the parent.
type powerLossWriter struct {
	t      *testing.T
	cmd    *exec.Cmd
	acks   string // the child's stdout: a file, so that a stopped child's acknowledgements are all in it
	events *bufio.Scanner
	stdin  io.WriteCloser
	stderr bytes.Buffer
	exited chan error
}

// startPowerLossWriter starts the writer on a store in mnt; it is killed
// when the test ends, if still running.
func startPowerLossWriter(t *testing.T, mnt string, seed uint64) *powerLossWriter {
	w := &powerLossWriter{t: t, acks: filepath.Join(t.TempDir(), "acks"), exited: make(chan error, 1)}
	out, err := os.Create(w.acks)
	require.NoError(t, err)
	defer out.Close()
	r, pw, err := os.Pipe()
	require.NoError(t, err)
	defer pw.Close()
	t.Cleanup(func() { r.Close() })
	w.events = bufio.NewScanner(r)

	w.cmd = exec.Command(os.Args[0], "-test.run", "^TestPowerLoss$")
	w.cmd.Env = append(os.Environ(), powerLossEnvDir+"="+filepath.Join(mnt, "store"),
		fmt.Sprintf("%s=%d", powerLossEnvSeed, seed))
	w.cmd.Stdout = out
	w.cmd.Stderr = &w.stderr
	w.cmd.ExtraFiles = []*os.File{pw}
	w.stdin, err = w.cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, w.cmd.Start())
	go func() { w.exited <- w.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-w.exited:
		default:
			_ = w.cmd.Process.Kill() // a stopped process dies of SIGKILL too
			<-w.exited
		}
	})
	return w
}

// next returns the writer's next event, failing the test if it ended.
func (w *powerLossWriter) next() string {
	if w.events.Scan() {
		return w.events.Text()
	}
	err := <-w.exited
	w.t.Fatalf("the writer ended (%v):\n%s\n%s", err, w.stderr.String(), tail(w.acks, 40))
	return ""
}

// resume lets a paused writer go on.
func (w *powerLossWriter) resume() {
	_, err := io.WriteString(w.stdin, "go\n")
	require.NoError(w.t, err)
}

// finish ends the writer at its pause and waits for it.
func (w *powerLossWriter) finish() {
	_, err := io.WriteString(w.stdin, "quit\n")
	require.NoError(w.t, err)
	require.NoError(w.t, <-w.exited, "the writer:\n%s\n%s", w.stderr.String(), tail(w.acks, 40))
	w.exited <- nil // for the cleanup
}

// stop sends SIGSTOP and waits until every thread of the writer stopped.
func (w *powerLossWriter) stop() {
	pid := w.cmd.Process.Pid
	require.NoError(w.t, syscall.Kill(pid, syscall.SIGSTOP))
	// A hang guard, not a measure: a stop takes microseconds.
	for deadline := time.Now().Add(time.Minute); !stopped(w.t, pid); {
		require.True(w.t, time.Now().Before(deadline), "the writer did not stop")
		time.Sleep(time.Millisecond)
	}
}

// cont sends SIGCONT.
func (w *powerLossWriter) cont() {
	require.NoError(w.t, syscall.Kill(w.cmd.Process.Pid, syscall.SIGCONT))
}

// stopped tells whether every thread of pid is stopped.
func stopped(t *testing.T, pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	require.NoError(t, err)
	require.NotEmpty(t, tasks, "the writer is gone")
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			return false // a thread ending
		}
		// pid (comm) state ...: comm may hold spaces and parentheses.
		rest := b[bytes.LastIndexByte(b, ')')+1:]
		if f := strings.Fields(string(rest)); len(f) == 0 || (f[0] != "T" && f[0] != "t") {
			return false
		}
	}
	return true
}

// readAcks reads the writer's acknowledgements: key -> sha256 of the body,
// less the results it expired.
func readAcks(t *testing.T, path string) map[string]string {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	acked := map[string]string{}
	lines := strings.Split(string(b), "\n")
	for _, line := range lines[:len(lines)-1] { // the last is not whole
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "ack":
			acked[f[1]] = f[2]
		case len(f) == 2 && f[0] == "expire":
			for k := range acked {
				if strings.HasPrefix(k, "e-"+f[1]+"-") {
					delete(acked, k)
				}
			}
		}
	}
	return acked
}

// tail returns the last n lines of a file, for a failure message.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// holdWriteback stops the kernel's periodic writeback of dirty pages for
// the test (the settings are global; they are restored when it ends), so
// that only what is synced, or what the journal carries, reaches the
// loop device.
func holdWriteback(t *testing.T) {
	for _, name := range []string{"dirty_expire_centisecs", "dirty_writeback_centisecs"} {
		path := filepath.Join("/proc/sys/vm", name)
		old, err := os.ReadFile(path)
		if err != nil {
			t.Skipf("cannot read %s: %v", path, err)
		}
		if err := os.WriteFile(path, []byte("360000"), 0o644); err != nil {
			t.Skipf("cannot hold writeback back (%s): %v", path, err)
		}
		t.Cleanup(func() { _ = os.WriteFile(path, old, 0o644) })
	}
}

// commitJournal makes ext4 commit its journal, by syncing a file of its
// own on the file system mounted at mnt.
func commitJournal(t *testing.T, mnt string) {
	f, err := os.OpenFile(filepath.Join(mnt, "journal-commit"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteString(time.Now().String())
	require.NoError(t, err)
	require.NoError(t, f.Sync())
}

// mountImage mounts the ext4 image img at mnt on a loop device of its
// own, and returns the function that unmounts it and frees the device.
func mountImage(t *testing.T, img, mnt string) func() {
	out, err := exec.Command("losetup", "-f", "--show", img).CombinedOutput()
	require.NoError(t, err, "losetup: %s", out)
	loop := strings.TrimSpace(string(out))
	require.NoError(t, os.MkdirAll(mnt, 0o700))
	if out, err := exec.Command("mount", "-t", "ext4", loop, mnt).CombinedOutput(); err != nil {
		_ = exec.Command("losetup", "-d", loop).Run()
		t.Fatalf("mount %s: %v: %s", loop, err, out)
	}
	return func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
			_ = exec.Command("umount", "-l", mnt).Run()
		}
		_ = exec.Command("losetup", "-d", loop).Run()
	}
}
