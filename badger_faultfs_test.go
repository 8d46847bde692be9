//go:build linux

package idem_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/stretchr/testify/require"
)

// loopExt4 mounts a new ext4 file system of size bytes, on a loop device
// over a file, with errors=remount-ro, and returns its mount point and
// the device's name. It skips the test, saying why, where that needs what
// the machine lacks (root, loop devices, mkfs.ext4).
func loopExt4(t *testing.T, size int64) (mnt, dev string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a loop device")
	}
	for _, tool := range []string{"mkfs.ext4", "losetup", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("no loop devices (/dev/loop-control: %v; try modprobe loop)", err)
	}
	base := t.TempDir()
	img := filepath.Join(base, "fs.img")
	require.NoError(t, os.WriteFile(img, nil, 0o600))
	require.NoError(t, os.Truncate(img, size))
	run := func(name string, args ...string) string {
		out, err := exec.Command(name, args...).CombinedOutput()
		require.NoError(t, err, "%s %s: %s", name, strings.Join(args, " "), out)
		return strings.TrimSpace(string(out))
	}
	run("mkfs.ext4", "-q", "-F", img)
	out, err := exec.Command("losetup", "-f", "--show", img).CombinedOutput()
	if err != nil {
		t.Skipf("cannot attach a loop device: %v: %s", err, out)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", loop).Run() })
	mnt = filepath.Join(base, "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o700))
	run("mount", "-t", "ext4", "-o", "errors=remount-ro", loop, mnt)
	// Lazy: a close that timed out may still hold files in it.
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	return mnt, filepath.Base(loop)
}

// faultFSEnv, set in a child process, names the store directory on a
// file system the parent will make fail.
const faultFSEnv = "IDEM_FAULTFS_DIR"

// TestBadger_CloseIsBoundedWhenTheFileSystemFails makes the file system
// under an open store fail (ext4's error trigger, which remounts it
// read-only): writes fail with ErrUnavailable, and Close returns, with
// the error and a word on the directory lock, rather than waiting on
// Badger's endless retries of its memtable flush. The store runs in a
// child process, whose exit ends those retries.
func TestBadger_CloseIsBoundedWhenTheFileSystemFails(t *testing.T) {
	if dir := os.Getenv(faultFSEnv); dir != "" {
		faultFSChild(t, dir)
		return
	}
	mnt, dev := loopExt4(t, 64<<20)
	trigger := filepath.Join("/sys/fs/ext4", dev, "trigger_fs_error")
	if _, err := os.Stat(trigger); err != nil {
		t.Skipf("the kernel has no ext4 error trigger (%s): %v", trigger, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestBadger_CloseIsBoundedWhenTheFileSystemFails$", "-test.v")
	cmd.Env = append(os.Environ(), faultFSEnv+"="+filepath.Join(mnt, "store"), "IDEM_FAULTFS_TRIGGER="+trigger)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the child:\n%s", out)
	require.Contains(t, string(out), "closed:", "the child:\n%s", out)
	t.Logf("child:\n%s", out)
}

func faultFSChild(t *testing.T, dir string) {
	s, err := idem.Open(dir, &idem.Options{SweepInterval: -1, CloseTimeout: time.Millisecond,
		Badger: idem.BadgerOptions{CloseWait: time.Second}})
	require.NoError(t, err)
	for i := range 100 {
		_, _, err := s.Do(bg, idem.Request{Key: fmt.Sprint(i)}, ok(string(faultBody(i))))
		require.NoError(t, err)
	}
	require.NoError(t, os.WriteFile(os.Getenv("IDEM_FAULTFS_TRIGGER"), []byte("1"), 0o200))

	_, _, err = s.Do(bg, idem.Request{Key: "after"}, ok("x"))
	require.ErrorIs(t, err, idem.ErrUnavailable, "a write on a file system gone read-only")

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			require.ErrorIs(t, err, idem.ErrUnavailable)
		}
		fmt.Printf("closed: %v\n", err)
	case <-time.After(time.Minute): // a hang guard, not a measure: CloseWait is 1s
		t.Fatal("Close did not return")
	}
	_, err = idem.Open(dir, nil)
	require.Error(t, err, "the directory is on a read-only file system, and still locked")
	fmt.Printf("reopen: %v\n", err)
}
