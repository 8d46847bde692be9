//go:build linux

package badgerstore_test

// The full-disk test fills a real file system under a Durable writer. The
// writer is a child process (the test binary run again), so that a signal,
// SIGBUS from a write through one of Badger's memory maps into a block the
// file system could not give, is seen as the child's death instead of
// killing the test. Each size runs on its own mount (tmpfs, and ext4 on a
// loop device); for each:
//
//  1. the writer makes Durable claims with 1 KiB results from 4 goroutines,
//     with the default options, until claims are refused, and goes on for
//     IDEM_FULLDISK_AFTER (60 s by default) after the first refusal, then
//     closes the store. Every answer it gets is appended to a file outside
//     the mount and synced before it counts as acknowledged;
//  2. a child reopens the store on the still-full disk: an error or a clean
//     open, never a signal;
//  3. a child opens the store with the space guard off, fills what is left
//     of the file system and writes, then opens it again on the full disk
//     and writes: with no space at all, every failure is an error (Badger's
//     files are allocated before they are mapped or grown);
//  4. the file system grows, and a child replays every acknowledged key,
//     byte for byte.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

const (
	fullDiskEnvMode  = "IDEM_FULLDISK_CHILD" // in a child: "write", "reopen", "nospace", "full" or "replay"
	fullDiskEnvDir   = "IDEM_FULLDISK_DIR"   // in a child: the store directory
	fullDiskEnvAcks  = "IDEM_FULLDISK_ACKS"  // in a child: the acknowledged keys, one a line
	fullDiskEnvOut   = "IDEM_FULLDISK_OUT"   // in a child: its report (JSON)
	fullDiskEnvAfter = "IDEM_FULLDISK_AFTER" // how long to write after the first refusal (60s)
	fullDiskEnvSizes = "IDEM_FULLDISK_SIZES" // the file systems, e.g. "tmpfs:48,ext4:128" (MiB)
	// requireRootEnv=1 (CI) turns the skips of a machine without root,
	// mount, loop devices or ext4 tools into failures.
	requireRootEnv = "IDEM_REQUIRE_ROOT"
)

const (
	fullDiskScope       = "fulldisk"
	fullDiskFingerprint = "fulldisk-v1"
	fullDiskWorkers     = 4
	fullDiskBody        = 1024
	fullDiskDefault     = "tmpfs:48,tmpfs:96,tmpfs:256,ext4:128"
	// fullDiskBackoff is the writer's pause after an error, as a client
	// backs off: without it four goroutines spin on refusals.
	fullDiskBackoff = 5 * time.Millisecond
	// fullDiskNeverRefused bounds the writing before any refusal: a
	// writer that has not filled the file system by then fails the test.
	fullDiskNeverRefused = 10 * time.Minute
	// fullDiskHangGuard is not an assertion on speed: it turns a child
	// that stopped making progress into a failure that shows its
	// goroutines (SIGQUIT), rather than a test timeout that shows nothing.
	fullDiskHangGuard = 5 * time.Minute
)

// fullDiskReport is what a child reports to the parent.
type fullDiskReport struct {
	Acked       int            // results acknowledged (and logged)
	AckedAfter  int            // of which after the first refusal
	Refusals    int            // claims refused for want of free space
	Errors      map[string]int // every error, by kind
	Samples     []string       // the first message of each kind
	Bad         []string       // errors that match neither ErrUnavailable nor ErrOutcomeNotRecorded
	FirstRefuse time.Duration  // from the open to the first refusal
	PeakUsed    int64          // peak bytes in use on the file system
	Size        int64          // the file system's size
	OpenErr     string
	OpenErrOK   bool // OpenErr wraps ErrUnavailable
	CloseErr    string
	CloseErrOK  bool // CloseErr wraps ErrUnavailable
	Replayed    int  // keys replayed byte for byte (replay)
}

// TestFullDisk: a Durable store on a file system that fills up refuses
// claims with ErrUnavailable, never dies of a signal, closes, reopens
// (or refuses to, with an error), and once the disk grows replays every
// result it acknowledged. IDEM_FULLDISK_AFTER sets how long the writer
// goes on after the first refusal (60s by default), IDEM_FULLDISK_SIZES
// the file systems ("tmpfs:48,tmpfs:96,tmpfs:256,ext4:128", MiB).
func TestFullDisk(t *testing.T) {
	if mode := os.Getenv(fullDiskEnvMode); mode != "" {
		fullDiskChild(t, mode)
		return
	}
	if raceEnabled {
		t.Skip("runs without the race detector, in a CI step of its own (.ci/run): its children fill file systems for minutes")
	}
	after := time.Minute
	if v := os.Getenv(fullDiskEnvAfter); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, fullDiskEnvAfter)
		after = d
	}
	sizes := fullDiskDefault
	if v := os.Getenv(fullDiskEnvSizes); v != "" {
		sizes = v
	}
	for _, fs := range strings.Split(sizes, ",") {
		kind, mib, ok := strings.Cut(strings.TrimSpace(fs), ":")
		n, err := strconv.Atoi(mib)
		require.True(t, ok && err == nil && n > 0 && (kind == "tmpfs" || kind == "ext4"), "%s: %q", fullDiskEnvSizes, fs)
		t.Run(fmt.Sprintf("%s-%dMiB", kind, n), func(t *testing.T) {
			fullDiskRun(t, kind, int64(n)<<20, after)
		})
	}
}

// fullDiskRun runs the four steps on one file system.
func fullDiskRun(t *testing.T, kind string, size int64, after time.Duration) {
	if os.Getenv(requireRootEnv) == "1" {
		// Registered first, so it runs last: a skip below is a failure.
		t.Cleanup(func() {
			if t.Skipped() {
				t.Errorf("%s=1: the full-disk test must run here, not skip", requireRootEnv)
			}
		})
	}
	var mnt string
	var grow func()
	switch kind {
	case "tmpfs":
		mnt = mountTmpfs(t, size)
		grow = func() { fullDiskCmd(t, "mount", "-o", fmt.Sprintf("remount,size=%d", size+256<<20), mnt) }
	case "ext4":
		for _, tool := range []string{"resize2fs", "e2fsck"} {
			if _, err := exec.LookPath(tool); err != nil {
				t.Skipf("needs %s: %v", tool, err)
			}
		}
		var dev string
		mnt, dev = loopExt4(t, size)                      // skips without root or loop devices
		img := filepath.Join(filepath.Dir(mnt), "fs.img") // loopExt4 keeps it there
		grow = func() {
			// Offline: an online resize needs CAP_SYS_RESOURCE, which a
			// container's root may lack. The check before it is e2fsck's
			// verdict on what the full disk left: clean.
			fullDiskCmd(t, "umount", mnt)
			require.NoError(t, os.Truncate(img, size+256<<20))
			fullDiskCmd(t, "losetup", "-c", "/dev/"+dev)
			fullDiskCmd(t, "e2fsck", "-f", "-y", "/dev/"+dev)
			fullDiskCmd(t, "resize2fs", "/dev/"+dev)
			fullDiskCmd(t, "mount", "-t", "ext4", "-o", "errors=remount-ro", "/dev/"+dev, mnt)
		}
	}
	dir := filepath.Join(mnt, "store")
	acks := filepath.Join(t.TempDir(), "acks") // on another file system
	out := t.TempDir()

	w := fullDiskStart(t, "write", dir, acks, filepath.Join(out, "write.json"), after)
	t.Logf("writer: %d acknowledged (%d after the first refusal), %d refusals (the first after %v), peak use %.1f of %.1f MiB, errors %v, close: %q",
		w.Acked, w.AckedAfter, w.Refusals, w.FirstRefuse.Round(time.Millisecond), mib(w.PeakUsed), mib(w.Size), w.Errors, w.CloseErr)
	require.Positive(t, w.Refusals, "the writer was never refused")
	require.Empty(t, w.Bad, "errors that are not ErrUnavailable")
	require.Zero(t, w.Errors["not recorded"], "a result was not recorded: %v", w.Samples)
	require.True(t, w.CloseErr == "" || w.CloseErrOK, "Close: %s", w.CloseErr)

	r := fullDiskStart(t, "reopen", dir, acks, filepath.Join(out, "reopen.json"), after)
	t.Logf("reopen on the full disk: open %q, close %q", r.OpenErr, r.CloseErr)
	require.True(t, r.OpenErr == "" || r.OpenErrOK, "reopen: %s", r.OpenErr)
	require.True(t, r.CloseErr == "" || r.CloseErrOK, "Close after the reopen: %s", r.CloseErr)

	acked := w.Acked
	for _, mode := range []string{"nospace", "full"} {
		n := fullDiskStart(t, mode, dir, acks, filepath.Join(out, mode+".json"), after)
		t.Logf("guard off, %s: open %q, %d acknowledged, errors %v %q, close %q",
			map[string]string{"nospace": "filled under the open store", "full": "opened on the full disk"}[mode],
			n.OpenErr, n.Acked, n.Errors, n.Samples, n.CloseErr)
		require.True(t, n.OpenErr == "" || n.OpenErrOK, "open with no space: %s", n.OpenErr)
		require.Empty(t, n.Bad, "errors that are neither ErrUnavailable nor ErrOutcomeNotRecorded")
		require.True(t, n.CloseErr == "" || n.CloseErrOK, "Close with no space: %s", n.CloseErr)
		acked += n.Acked
	}
	require.NoError(t, os.Remove(filepath.Join(mnt, "filler")))

	grow()
	v := fullDiskStart(t, "replay", dir, acks, filepath.Join(out, "replay.json"), after)
	require.Empty(t, v.OpenErr, "open after the disk grew")
	require.Equal(t, acked, v.Replayed, "every acknowledged key replays")
	require.Empty(t, v.CloseErr)
	t.Logf("after the disk grew: %d acknowledged keys replayed byte for byte", v.Replayed)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// fullDiskCmd runs a command the test needs, failing the test on an error.
func fullDiskCmd(t *testing.T, name string, args ...string) {
	out, err := exec.Command(name, args...).CombinedOutput()
	require.NoError(t, err, "%s %s: %s", name, strings.Join(args, " "), out)
}

// mountTmpfs mounts a tmpfs of size bytes for the test; it is unmounted
// (lazily: a child's close that timed out may still hold files) when the
// test ends.
func mountTmpfs(t *testing.T, size int64) string {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	for _, tool := range []string{"mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o700))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	return mnt
}

// fillUp writes a file of zeros until the file system of mnt is full.
func fillUp(t *testing.T, mnt string) {
	f, err := os.Create(filepath.Join(mnt, "filler"))
	require.NoError(t, err)
	defer f.Close()
	zero := make([]byte, 64<<10)
	for len(zero) > 0 {
		if _, err := f.Write(zero); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			zero = zero[:len(zero)/2] // the last blocks, then nothing
		}
	}
	require.NoError(t, f.Sync())
}

// fullDiskStart runs a child in mode and returns its report. A child that
// dies of a signal, fails, or hangs fails the test.
func fullDiskStart(t *testing.T, mode, dir, acks, out string, after time.Duration) fullDiskReport {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestFullDisk$", "-test.v")
	cmd.Env = append(os.Environ(), fullDiskEnvMode+"="+mode, fullDiskEnvDir+"="+dir,
		fullDiskEnvAcks+"="+acks, fullDiskEnvOut+"="+out, fullDiskEnvAfter+"="+after.String())
	var stderr bytes.Buffer
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	guard := fullDiskHangGuard + after
	if mode == "write" {
		guard += fullDiskNeverRefused
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(guard):
		_ = cmd.Process.Signal(syscall.SIGQUIT) // its goroutines, to stderr
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		t.Fatalf("the %s child made no progress in %v:\n%s", mode, guard, tailBytes(stderr.Bytes(), 200))
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("the %s child died of %v:\n%s", mode, ws.Signal(), tailBytes(stderr.Bytes(), 80))
		}
		// Go turns a SIGBUS in Go code (a write through a mapping into
		// a block the disk could not give) into a fatal error, exit 2.
		if i := bytes.Index(stderr.Bytes(), []byte("signal SIG")); i >= 0 {
			at := max(0, bytes.LastIndex(stderr.Bytes()[:i], []byte("\n"))-200)
			t.Fatalf("the %s child died of a signal (%v):\n%s", mode, err, headBytes(stderr.Bytes()[at:], 40))
		}
	}
	require.NoError(t, err, "the %s child:\n%s", mode, tailBytes(stderr.Bytes(), 80))
	b, err := os.ReadFile(out)
	require.NoError(t, err, "the %s child's report", mode)
	var r fullDiskReport
	require.NoError(t, json.Unmarshal(b, &r))
	return r
}

func headBytes(b []byte, n int) string {
	lines := strings.Split(string(b), "\n")
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

func tailBytes(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// fullDiskChild is the child's side.
func fullDiskChild(t *testing.T, mode string) {
	dir, out := os.Getenv(fullDiskEnvDir), os.Getenv(fullDiskEnvOut)
	after, err := time.ParseDuration(os.Getenv(fullDiskEnvAfter))
	require.NoError(t, err)
	r := fullDiskReport{Errors: map[string]int{}}
	switch mode {
	case "write":
		fullDiskWrite(t, dir, &r, after)
	case "reopen":
		s, err := idem.Open(dir, nil)
		if fullDiskOpened(&r, err) {
			fullDiskClosed(&r, s.Close())
		}
	case "nospace", "full":
		// The guard off: opened on the disk as the writer left it, then
		// filled to the last block under the open store (nospace), or
		// opened on the full disk (full). Each in a process of its own: a
		// Close that timed out keeps the directory locked until it exits.
		s, err := idemtest.OpenBadger(dir, nil, badgerstore.Options{FreeSpaceReserve: -1})
		if mode == "nospace" {
			fillUp(t, filepath.Dir(dir))
		}
		if fullDiskOpened(&r, err) {
			w := newFullDiskWriter(t, s, &r, mode)
			w.run(func(int) bool { return w.tries.Load() < 5000 })
			fullDiskClosed(&r, s.Close())
		}
	case "replay":
		s, err := idem.Open(dir, nil)
		if fullDiskOpened(&r, err) {
			fullDiskReplay(t, s, &r)
			fullDiskClosed(&r, s.Close())
		}
	default:
		t.Fatalf("unknown mode %q", mode)
	}
	b, err := json.Marshal(r)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(out, b, 0o600))
}

// fullDiskOpened records an open's error (the last, and whether every one
// wrapped ErrUnavailable) and tells whether the store opened.
func fullDiskOpened(r *fullDiskReport, err error) bool {
	if err != nil {
		ok := errors.Is(err, backend.ErrUnavailable) && (r.OpenErr == "" || r.OpenErrOK)
		r.OpenErr, r.OpenErrOK = err.Error(), ok
	}
	return err == nil
}

// fullDiskClosed records a Close's error, as fullDiskOpened.
func fullDiskClosed(r *fullDiskReport, err error) {
	if err != nil {
		ok := errors.Is(err, backend.ErrUnavailable) && (r.CloseErr == "" || r.CloseErrOK)
		r.CloseErr, r.CloseErrOK = err.Error(), ok
	}
}

// fullDiskWrite writes until claims are refused and for after more, with
// the default options, and closes the store.
func fullDiskWrite(t *testing.T, dir string, r *fullDiskReport, after time.Duration) {
	require.NoError(t, os.MkdirAll(dir, 0o700))
	start := time.Now()
	s, err := idem.Open(dir, nil)
	require.NoError(t, err)
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(dir, &st))
	r.Size = int64(st.Blocks) * st.Bsize
	stop := make(chan struct{})
	sampled := make(chan struct{})
	var peak atomic.Int64
	go func() { // the disk's use, sampled
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var st unix.Statfs_t
			if unix.Statfs(dir, &st) == nil {
				used := int64(st.Blocks-st.Bfree) * st.Bsize
				if used > peak.Load() {
					peak.Store(used)
				}
			}
			select {
			case <-tick.C:
			case <-stop:
				return
			}
		}
	}()
	w := newFullDiskWriter(t, s, r, "w")
	w.run(func(int) bool {
		first := w.firstRefusal.Load()
		if first == 0 {
			return time.Since(start) < fullDiskNeverRefused
		}
		return time.Since(time.Unix(0, first)) < after
	})
	if first := w.firstRefusal.Load(); first != 0 {
		r.FirstRefuse = time.Unix(0, first).Sub(start)
	}
	fullDiskClosed(r, s.Close())
	close(stop)
	<-sampled
	r.PeakUsed = peak.Load()
}

// fullDiskWriter runs Do from fullDiskWorkers goroutines and logs every
// acknowledged key, synced, to the acks file.
type fullDiskWriter struct {
	t            *testing.T
	s            *idem.Store
	prefix       string
	tries        atomic.Int64
	firstRefusal atomic.Int64 // unix nanos, 0 before the first refusal

	mu   sync.Mutex // guards acks and r
	acks *os.File
	r    *fullDiskReport
}

func newFullDiskWriter(t *testing.T, s *idem.Store, r *fullDiskReport, prefix string) *fullDiskWriter {
	f, err := os.OpenFile(os.Getenv(fullDiskEnvAcks), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return &fullDiskWriter{t: t, s: s, prefix: prefix, acks: f, r: r}
}

// run writes until more returns false (asked before each Do).
func (w *fullDiskWriter) run(more func(worker int) bool) {
	var wg sync.WaitGroup
	for g := range fullDiskWorkers {
		wg.Go(func() {
			for i := 0; more(g); i++ {
				w.tries.Add(1)
				key := fmt.Sprintf("%s-%d-%d", w.prefix, g, i)
				_, _, err := w.s.Do(context.Background(), fullDiskRequest(key), func(context.Context) (backend.Result, error) {
					return fullDiskResult(key), nil
				})
				w.answer(key, err)
				if err != nil {
					time.Sleep(fullDiskBackoff)
				}
			}
		})
	}
	wg.Wait()
}

// answer records one answer: an acknowledged key is synced to the acks
// file before it counts.
func (w *fullDiskWriter) answer(key string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.r
	if err == nil {
		_, werr := fmt.Fprintln(w.acks, key)
		if werr == nil {
			werr = w.acks.Sync()
		}
		if werr != nil {
			w.t.Errorf("logging the acknowledgement of %s: %v", key, werr)
			return
		}
		r.Acked++
		if w.firstRefusal.Load() != 0 {
			r.AckedAfter++
		}
		return
	}
	kind := "other"
	switch {
	case errors.Is(err, backend.ErrUnavailable) && strings.Contains(err.Error(), "free space below the reserve"):
		kind = "refused: free space"
		r.Refusals++
		w.firstRefusal.CompareAndSwap(0, time.Now().UnixNano())
	case errors.Is(err, backend.ErrUnavailable):
		kind = "unavailable"
	case errors.Is(err, idem.ErrOutcomeNotRecorded):
		kind = "not recorded"
	default:
		if len(r.Bad) < 10 {
			r.Bad = append(r.Bad, err.Error())
		}
	}
	if r.Errors[kind] == 0 {
		r.Samples = append(r.Samples, kind+": "+err.Error())
	}
	r.Errors[kind]++
}

// fullDiskReplay checks that every acknowledged key replays its result.
func fullDiskReplay(t *testing.T, s *idem.Store, r *fullDiskReport) {
	b, err := os.ReadFile(os.Getenv(fullDiskEnvAcks))
	require.NoError(t, err)
	for _, key := range strings.Fields(string(b)) {
		res, replayed, err := s.Do(context.Background(), fullDiskRequest(key), func(context.Context) (backend.Result, error) {
			return backend.Result{}, fmt.Errorf("%s: acknowledged, but the store ran it again", key)
		})
		require.NoError(t, err, key)
		require.True(t, replayed, key)
		require.Equal(t, fullDiskResult(key).Body, res.Body, key)
		r.Replayed++
	}
}

func fullDiskRequest(key string) idem.Request {
	return idem.Request{Scope: fullDiskScope, Key: key, Fingerprint: fullDiskFingerprint}
}

// fullDiskResult is key's result: 1 KiB that only key gives.
func fullDiskResult(key string) backend.Result {
	body := make([]byte, 0, fullDiskBody)
	var n [8]byte
	for i := uint64(0); len(body) < fullDiskBody; i++ {
		binary.BigEndian.PutUint64(n[:], i)
		sum := sha256.Sum256(append([]byte(key), n[:]...))
		body = append(body, sum[:]...)
	}
	return backend.Result{Status: 200, Body: body}
}
