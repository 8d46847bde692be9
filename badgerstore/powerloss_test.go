//go:build linux

package badgerstore_test

// The power-loss test cuts the power under a real writer, as far as a test
// can: the store lives on an ext4 file system on a loop device, the
// kernel's writeback is held back, and the writer (a child process) is
// stopped with SIGSTOP at chosen moments. The loop device's backing file
// then holds exactly what the file system sent to its disk: what the store
// synced, plus whatever the journal and the kernel happened to write. A
// copy of it is what the disk would hold after a power cut at that moment;
// the dirty pages of the mounted file system are what the cut loses. The
// copy is checked with e2fsck, mounted and opened: every result the
// writer had acknowledged as Durable must replay, byte for byte.
//
// The writer runs value-log GC after expiring most of its large results
// (over the 16 KiB value threshold, so in Badger's value log), and closes
// and reopens its store (a checkpoint) every few rounds; snapshots are
// taken right after each GC that rewrote something, after checkpoints and
// at random moments while it writes.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/idemtest"
	"github.com/stretchr/testify/require"
)

const (
	powerLossEnvDir   = "IDEM_POWERLOSS_DIR"       // in a child: the store directory
	powerLossEnvSeed  = "IDEM_POWERLOSS_SEED"      // the seed; in the parent, overrides the random one
	powerLossEnvSnaps = "IDEM_POWERLOSS_SNAPSHOTS" // in the parent: how many snapshots at least
)

const (
	plCloseEvery   = 6  // rounds between a close and reopen (the first after round 1)
	plMaxRounds    = 60 // without a GC that rewrote by then, the test fails
	plDefaultSnaps = 2
)

// TestPowerLoss: every acknowledged Durable result survives a power cut,
// including one right after value-log GC and one right after a
// checkpoint. IDEM_POWERLOSS_SNAPSHOTS sets how many snapshots are
// checked at least (2 by default; there is always one right after a GC
// that rewrote value-log files and one right after a checkpoint).
func TestPowerLoss(t *testing.T) {
	if dir := os.Getenv(powerLossEnvDir); dir != "" {
		powerLossChild(t, dir)
		return
	}
	mnt, _ := loopExt4(t, 512<<20) // skips without root or loop devices
	for _, tool := range []string{"e2fsck", "cp"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	holdWriteback(t)
	want := plDefaultSnaps
	if v := os.Getenv(powerLossEnvSnaps); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, powerLossEnvSnaps)
		want = n
	}
	seed := rand.Uint64()
	if v := os.Getenv(powerLossEnvSeed); v != "" {
		var err error
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, powerLossEnvSeed)
	}
	t.Logf("seed %d (%s=%d repeats the parent's choices)", seed, powerLossEnvSeed, seed)
	rng := rand.New(rand.NewPCG(seed, 2))

	w := startPowerLossWriter(t, mnt, seed)
	// loopExt4 keeps its image beside the mount point.
	p := &powerLoss{t: t, w: w, img: filepath.Join(filepath.Dir(mnt), "fs.img"), mnt: mnt, work: t.TempDir()}
	nextStop := 40 + rng.IntN(400)
	for p.snaps < want || p.gcSnaps == 0 || p.ckptSnaps == 0 || p.tableSnaps == 0 {
		ev := w.next()
		switch {
		case ev == "table":
			// Badger is writing a table, or has just written one: a
			// memtable flush (the only copy of its writes on the disk is
			// idem's log until the table and the MANIFEST are synced) or a
			// compaction. The writer goes on until the stop.
			if p.tableSnaps == 0 || rng.IntN(8) == 0 {
				p.snapshot("while Badger writes a table (a memtable flush or a compaction)")
				p.tableSnaps++
			}
		case ev == "a":
			if nextStop--; nextStop == 0 {
				p.snapshot("while writing")
				nextStop = 40 + rng.IntN(400)
			}
		case strings.HasPrefix(ev, "gc "):
			p.rounds++
			n, err := strconv.Atoi(strings.TrimPrefix(ev, "gc "))
			require.NoError(t, err, "event %q", ev)
			p.gcRewrote += n
			if n > 0 || rng.IntN(4) == 0 {
				p.snapshot(fmt.Sprintf("right after value-log GC, which rewrote %d files", n))
				if n > 0 {
					p.gcSnaps++
				}
			}
			w.resume()
			require.Less(t, p.rounds, plMaxRounds,
				"no value-log GC rewrote a file in %d rounds: the test would prove nothing", p.rounds)
		case ev == "checkpoint close":
			if p.ckptSnaps == 0 || rng.IntN(2) == 0 {
				p.snapshot("right after a checkpoint (the writer closed its store)")
				p.ckptSnaps++
			}
			w.resume()
		case ev == "checkpoint log":
			p.snapshot("right after a checkpoint (the store's log was full)")
			p.ckptSnaps++
			w.resume()
		default:
			t.Fatalf("unknown event %q from the writer", ev)
		}
	}
	w.finish()
	t.Logf("%d snapshots (%d right after a GC that rewrote, %d after a checkpoint, %d as a table was written) over %d rounds; GC rewrote %d files; %d acknowledged results checked in all, none lost or wrong",
		p.snaps, p.gcSnaps, p.ckptSnaps, p.tableSnaps, p.rounds, p.gcRewrote, p.checked)
}

// powerLoss is the parent's side: the snapshots and their checks.
type powerLoss struct {
	t                         *testing.T
	w                         *powerLossWriter
	img, mnt, work            string
	snaps, gcSnaps, ckptSnaps int
	tableSnaps                int
	rounds, gcRewrote         int
	checked                   int
}

// snapshot stops the writer, takes what its disk holds and lets it go on,
// then checks the copy.
func (p *powerLoss) snapshot(when string) {
	t := p.t
	p.w.stop()
	acked := readAcks(t, p.w.acks)
	// A journal commit, as ext4's 5-second timer or any other process's
	// fsync would make one: it carries the metadata of everything done so
	// far (a deleted value log, say) but not the data writeback holds.
	commitJournal(t, p.mnt)
	snap := filepath.Join(p.work, "snap.img")
	out, err := exec.Command("cp", "--sparse=always", p.img, snap).CombinedOutput()
	require.NoError(t, err, "cp: %s", out)
	p.w.cont()
	defer os.Remove(snap)

	p.snaps++
	bad := checkSnapshot(t, snap, filepath.Join(p.work, "snap"), acked)
	p.checked += len(acked)
	t.Logf("snapshot %d, %s: %d acknowledged results, %d lost or wrong", p.snaps, when, len(acked), len(bad))
	if len(bad) > 0 {
		t.Fatalf("snapshot %d (%s): %d of %d acknowledged results did not replay:\n%s",
			p.snaps, when, len(bad), len(acked), strings.Join(bad[:min(len(bad), 20)], "\n"))
	}
}

// checkSnapshot repairs the image as a boot would (e2fsck replays the
// journal), mounts it and replays every acknowledged key. It returns what
// failed, one line a key.
func checkSnapshot(t *testing.T, img, mnt string, acked map[string]string) []string {
	out, err := exec.Command("e2fsck", "-fy", img).CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() < 4 {
		err = nil // 1 and 2: errors corrected (the journal replayed, orphans freed)
	}
	require.NoError(t, err, "e2fsck:\n%s", out)
	unmount := mountImage(t, img, mnt)
	defer unmount()

	s, err := openPowerLoss(filepath.Join(mnt, "store"), idemtest.NewClock(powerLossStart()))
	require.NoError(t, err, "opening the store on the copy")
	defer func() { require.NoError(t, s.Close()) }()
	var bad []string
	for key, want := range acked {
		res, replayed, err := s.Do(bg, idem.Request{Key: key}, func(context.Context) (backend.Result, error) {
			return backend.Result{}, errRanAgain
		})
		switch got := fmt.Sprintf("%x", sha256.Sum256(res.Body)); {
		case err != nil:
			bad = append(bad, fmt.Sprintf("%s: %v", key, err))
		case !replayed:
			bad = append(bad, fmt.Sprintf("%s: not replayed", key))
		case got != want:
			bad = append(bad, fmt.Sprintf("%s: body sha256 %s, acknowledged %s", key, got, want))
		}
	}
	return bad
}

// powerLossChild is the writer. It prints "ack KEY SHA256" on stdout once
// a result is acknowledged and "expire ROUND" before the round's ephemeral
// results expire, and tells the parent on fd 3: "a" per acknowledgement,
// "gc N" after GC (N value-log files gone), "checkpoint close" after a
// close, "checkpoint log" after the store checkpointed on its own (its
// log was full; idem.mark changed), and "table" when a table appeared
// since the last acknowledgement (Badger flushing a memtable or
// compacting; the writer goes on). After "gc", "checkpoint close" and
// "checkpoint log" it waits for a line on stdin: "go" goes on, anything
// else ends it.
func powerLossChild(t *testing.T, dir string) {
	events := os.NewFile(3, "powerloss-events")
	in := bufio.NewReader(os.Stdin)
	seed, err := strconv.ParseUint(os.Getenv(powerLossEnvSeed), 10, 64)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(seed, 1))
	clk := idemtest.NewClock(powerLossStart())
	s, err := openPowerLoss(dir, clk)
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	tell := func(ev string) {
		_, err := fmt.Fprintln(events, ev)
		require.NoError(t, err)
	}
	pause := func(ev string) {
		tell(ev)
		if line, err := in.ReadString('\n'); err != nil || line != "go\n" {
			t.SkipNow() // the parent has seen enough: end here, cleanly
		}
	}
	mark := func() string {
		b, err := os.ReadFile(filepath.Join(dir, "idem.mark"))
		require.NoError(t, err)
		return string(b)
	}
	last := mark()
	tables := map[string]bool{}
	newTable := func() bool {
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		seen := false
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".sst") && !tables[e.Name()] {
				tables[e.Name()], seen = true, true
			}
		}
		return seen
	}
	newTable()
	for round := 0; ; round++ {
		writeGCRound(t, s, rng, round, func(key string, body []byte) {
			fmt.Printf("ack %s %x\n", key, sha256.Sum256(body))
			tell("a")
			if newTable() {
				tell("table")
			}
			if m := mark(); m != last {
				last = m
				pause("checkpoint log")
			}
		})
		fmt.Printf("expire %d\n", round)
		pause(fmt.Sprintf("gc %d", collectGCRound(t, s, clk, dir)))
		if round%plCloseEvery == 1 {
			require.NoError(t, s.Close())
			pause("checkpoint close")
			s, err = openPowerLoss(dir, clk)
			require.NoError(t, err)
			last = mark()
		}
	}
}
