//go:build linux

package badgerstore_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
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
	mnt, dev := loopExt4(t, 128<<20) // room for the free-space reserve (about 70 MiB)
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
	s, err := idemtest.OpenBadger(dir, &idem.Options{SweepInterval: -1, CloseTimeout: time.Millisecond}, badgerstore.Options{CloseWait: time.Second})
	require.NoError(t, err)
	for i := range 100 {
		_, _, err := s.Do(bg, idem.Request{Key: fmt.Sprint(i)}, ok(string(faultBody(i))))
		require.NoError(t, err)
	}
	require.NoError(t, os.WriteFile(os.Getenv("IDEM_FAULTFS_TRIGGER"), []byte("1"), 0o200))

	_, _, err = s.Do(bg, idem.Request{Key: "after"}, ok("x"))
	require.ErrorIs(t, err, backend.ErrUnavailable, "a write on a file system gone read-only")

	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			require.ErrorIs(t, err, backend.ErrUnavailable)
		}
		fmt.Printf("closed: %v\n", err)
	case <-time.After(time.Minute): // a hang guard, not a measure: CloseWait is 1s
		t.Fatal("Close did not return")
	}
	_, err = idem.Open(dir, nil)
	require.Error(t, err, "the directory is on a read-only file system, and still locked")
	fmt.Printf("reopen: %v\n", err)
}

// fullEnv, set in a child process, names the store directory on a small
// tmpfs the child fills until the store refuses claims.
const fullEnv = "IDEM_FULL_DIR"

// fullBody is the body of key i in TestBadger_FullDisk: 64 KiB, in the
// value log.
func fullBody(i int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("%08d", i)), 8<<10) }

// TestBadger_FullDisk fills a small tmpfs from a child process until the
// store refuses new claims: the child ends normally (no SIGBUS), having
// been told ErrUnavailable; a store does not open on the full file
// system; once space returns, every acknowledged key replays and new
// claims go through.
func TestBadger_FullDisk(t *testing.T) {
	if dir := os.Getenv(fullEnv); dir != "" {
		fullChild(t, dir)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	base := t.TempDir()
	mnt := filepath.Join(base, "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o700))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=128m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	dir := filepath.Join(mnt, "store")

	cmd := exec.Command(os.Args[0], "-test.run", "^TestBadger_FullDisk$", "-test.v")
	cmd.Env = append(os.Environ(), fullEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the child must end normally:\n%s", out)
	var acked int
	for _, line := range strings.Split(string(out), "\n") {
		if _, err := fmt.Sscanf(line, "acknowledged %d", &acked); err == nil {
			break
		}
	}
	require.Positive(t, acked, "the child:\n%s", out)
	t.Logf("the child acknowledged %d keys before the store refused claims", acked)

	// Fill what the reserve kept: opening for writing must be refused.
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	require.NoError(t, err)
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	require.NoError(t, f.Close())
	_, err = idem.Open(dir, nil)
	require.ErrorIs(t, err, backend.ErrUnavailable, "opening on a full file system")
	require.ErrorContains(t, err, "free space")
	t.Logf("open while full: %v", err)

	// Space returns (the file system grows, as an operator would free or
	// add space): every acknowledged key replays, and claims resume.
	require.NoError(t, os.Remove(filler))
	if out, err := exec.Command("mount", "-o", "remount,size=256m", mnt).CombinedOutput(); err != nil {
		t.Fatalf("cannot grow the tmpfs: %v: %s", err, out)
	}
	s := openStore(t, dir, nil)
	for i := range acked {
		res, replayed, err := s.Do(bg, idem.Request{Key: fmt.Sprint(i)}, func(context.Context) (backend.Result, error) {
			return backend.Result{}, fmt.Errorf("the effect of key %d ran again", i)
		})
		require.NoError(t, err, "key %d", i)
		require.True(t, replayed)
		require.Equal(t, fullBody(i), res.Body, "key %d", i)
	}
	_, replayed, err := s.Do(bg, idem.Request{Key: "new"}, ok("x"))
	require.NoError(t, err)
	require.False(t, replayed)
}

func fullChild(t *testing.T, dir string) {
	s := openStore(t, dir, nil)
	n := 0
	for ; ; n++ {
		_, _, err := s.Do(bg, idem.Request{Key: fmt.Sprint(n)}, ok(string(fullBody(n))))
		if err != nil {
			require.ErrorIs(t, err, backend.ErrUnavailable)
			require.ErrorContains(t, err, "free space")
			fmt.Printf("refused: %v\n", err)
			break
		}
	}
	// Replays go on while claims are refused.
	res, _, err := s.Do(bg, idem.Request{Key: "0"}, ok("never"))
	require.NoError(t, err)
	require.Equal(t, fullBody(0), res.Body)
	require.NoError(t, s.Close())
	fmt.Printf("acknowledged %d\n", n)
}
