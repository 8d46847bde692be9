package badgerstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/stretchr/testify/require"
)

// backupBody is key k's result: those of keys ending in 3 over Badger's
// value threshold (16 KiB), so that the backup carries value-log entries
// too.
func backupBody(k string) []byte {
	b := []byte("result of " + k + ";")
	n := 1
	if strings.HasSuffix(k, "3") {
		n = 20 << 10 / len(b)
	}
	return bytes.Repeat(b, n)
}

// TestStore_Backup_UnderLoad checks the cut: goroutines run Do on
// distinct keys while Backup runs; restored elsewhere, every key
// acknowledged before the backup began replays its own result byte for
// byte, no key begun after the backup's read began is there, and the
// claims in progress at the backup come back orphaned and are settled by
// the Resolver, neither replayed as done nor run again.
func TestStore_Backup_UnderLoad(t *testing.T) {
	for _, d := range []backend.Durability{backend.Durable, backend.Fast} {
		t.Run(d.String(), func(t *testing.T) { backupUnderLoad(t, d) })
	}
}

// loadKeys are the keys of a load run, by when they were acknowledged.
type loadKeys struct {
	mu sync.Mutex
	// before: acknowledged before Backup was called; late: begun once the
	// backup had written its first chunk (its read had begun); during: the
	// others acknowledged.
	before, during, late []string
	enough, lateEnough   chan struct{}
}

func (l *loadKeys) add(k string, pre, late bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case pre:
		if l.before = append(l.before, k); len(l.before) == 400 {
			close(l.enough)
		}
	case late:
		if l.late = append(l.late, k); len(l.late) == 50 {
			close(l.lateEnough)
		}
	default:
		l.during = append(l.during, k)
	}
}

// gateWriter calls gate before its second write (the backup's first
// chunk: the header comes first).
type gateWriter struct {
	bytes.Buffer
	writes int
	gate   func()
}

func (g *gateWriter) Write(p []byte) (int, error) {
	if g.writes++; g.writes == 2 {
		g.gate()
	}
	return g.Buffer.Write(p)
}

func backupUnderLoad(t *testing.T, d backend.Durability) {
	src := openStore(t, t.TempDir(), &idem.Options{Durability: d})
	// The downstream: every effect leaves its result here, and the
	// Resolver reads it back.
	var ledger sync.Map
	held, _, err := src.Begin(bg, idem.Request{Key: "held", Fingerprint: "fp-held"})
	require.NoError(t, err)
	ledger.Store("held", []byte("resolved"))

	var started, gated, stop atomic.Bool
	keys := &loadKeys{enough: make(chan struct{}), lateEnough: make(chan struct{})}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				k := fmt.Sprintf("g%d-k%d", g, i)
				late := gated.Load()
				res, replayed, err := src.Do(bg, idem.Request{Key: k}, func(context.Context) (backend.Result, error) {
					ledger.Store(k, backupBody(k))
					return backend.Result{Status: 201, Body: backupBody(k)}, nil
				})
				if !assertNoErr(t, err) || replayed || !bytes.Equal(res.Body, backupBody(k)) {
					t.Errorf("Do(%s) on the source: replayed=%v, body of %d bytes", k, replayed, len(res.Body))
					return
				}
				// Read after the answer: false means the answer came
				// before Backup was called.
				keys.add(k, !started.Load(), late)
			}
		})
	}
	<-keys.enough
	started.Store(true)
	// The load goes on while the backup runs: its first chunk waits for 50
	// keys more.
	file := &gateWriter{gate: func() {
		gated.Store(true)
		<-keys.lateEnough
	}}
	info, err := src.Backup(bg, file)
	stop.Store(true)
	wg.Wait()
	require.NoError(t, err)
	require.Equal(t, int64(file.Len()), info.Bytes)
	require.NotEmpty(t, info.Store)
	// Completed on the source after the backup: the restored store must not know.
	require.NoError(t, held.Complete(bg, backend.Result{Status: 200, Body: []byte("after the backup")}))
	require.NoError(t, src.Close())

	dst := filepath.Join(t.TempDir(), "restored")
	got, err := badgerstore.Restore(bg, &file.Buffer, dst, badgerstore.Options{})
	require.NoError(t, err)
	require.Equal(t, *info, *got)
	checkRestored(t, dst, &ledger, keys)
}

// checkRestored opens the restored store with a Resolver over the ledger
// and checks every key of the load.
func checkRestored(t *testing.T, dir string, ledger *sync.Map, keys *loadKeys) {
	var mu sync.Mutex
	var asked []string // the claims in progress at the backup: held, and Do calls under way
	resolver := idem.ResolverFunc(func(_ context.Context, rec *backend.Record) (idem.Resolution, error) {
		mu.Lock() // a Sweep resolves claims concurrently
		asked = append(asked, rec.Key)
		mu.Unlock()
		body, ok := ledger.Load(rec.Key)
		if !ok {
			return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
		}
		return idem.Resolution{Verdict: idem.VerdictCommitted, Result: backend.Result{Status: 200, Body: body.([]byte)}}, nil
	})
	s := openStore(t, dir, &idem.Options{Resolver: resolver})
	rec, err := s.Get(bg, "", "held")
	require.NoError(t, err)
	require.Equal(t, backend.StateInProgress, rec.State)
	require.Empty(t, rec.Owner, "a restored claim has no owner: it is orphaned")
	rep, err := s.Sweep(bg)
	require.NoError(t, err)
	require.Contains(t, asked, "held")
	require.Equal(t, len(asked), rep.Committed+rep.NotCommitted)

	for _, k := range asked {
		require.NotContains(t, keys.before, k, "a key acknowledged before the backup came back in progress")
	}
	t.Logf("%d claims in progress at the backup; %d keys acknowledged before the backup, %d while it began, %d begun after its read",
		len(asked), len(keys.before), len(keys.during), len(keys.late))
	for _, k := range append(keys.before, "held") {
		res, replayed, err := s.Do(bg, idem.Request{Key: k, Fingerprint: fpOf(k)}, func(context.Context) (backend.Result, error) {
			t.Errorf("%s ran again on the restored store", k)
			return backend.Result{}, nil
		})
		require.NoError(t, err)
		require.True(t, replayed, k)
		want := backupBody(k)
		if k == "held" {
			want = []byte("resolved")
		}
		require.Equal(t, want, res.Body, k)
	}
	// Keys acknowledged while the backup began may or may not be in it;
	// those that are replay their own result.
	for _, k := range keys.during {
		if rec, err := s.Get(bg, "", k); err == nil && rec.State == backend.StateDone {
			require.Equal(t, backupBody(k), rec.Result.Body, k)
		}
	}
	// Keys begun after the backup's read began are not in it.
	for _, k := range keys.late {
		_, err := s.Get(bg, "", k)
		require.ErrorIs(t, err, backend.ErrNotFound, k)
	}
}

func fpOf(k string) string {
	if k == "held" {
		return "fp-held"
	}
	return ""
}

func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// smallBackup backs up a store holding a few results, one over the value
// threshold.
func smallBackup(t *testing.T) []byte {
	t.Helper()
	s := openStore(t, t.TempDir(), nil)
	for _, k := range []string{"a", "b", "k3"} {
		_, _, err := s.Do(bg, idem.Request{Key: k}, func(context.Context) (backend.Result, error) {
			return backend.Result{Status: 200, Body: backupBody(k)}, nil
		})
		require.NoError(t, err)
	}
	var file bytes.Buffer
	_, err := s.Backup(bg, &file)
	require.NoError(t, err)
	return file.Bytes()
}

func TestRestore_DamagedFile_ErrCorrupt(t *testing.T) {
	file := smallBackup(t)
	n := len(file)
	cases := map[string][]byte{
		"empty":   {},
		"foreign": []byte("PK\x03\x04 not a backup at all, but long enough to read a header"),
	}
	for _, cut := range []int{5, 20, 60, n / 2, n - 40, n - 33, n - 1} {
		cases[fmt.Sprintf("cut at %d of %d", cut, n)] = file[:cut]
	}
	cases["a byte appended"] = append(bytes.Clone(file), 0)
	// Flips in the magic, the header, the middle, the end's length and
	// its SHA-256; then in the first chunk's length, checksum and data.
	for _, at := range []int{3, 30, n / 2, n - 36, n - 5} {
		f := bytes.Clone(file)
		f[at] ^= 0x10
		cases[fmt.Sprintf("bit flipped at %d of %d", at, n)] = f
	}
	head := headerLen(t, file)
	for _, at := range []int{head, head + 5, head + 8, head + 200} {
		f := bytes.Clone(file)
		f[at] ^= 0x01
		cases[fmt.Sprintf("bit flipped at %d (first chunk)", at)] = f
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "restored")
			_, err := badgerstore.Restore(bg, bytes.NewReader(f), dir, badgerstore.Options{})
			require.ErrorIs(t, err, backend.ErrCorrupt)
			entries, _ := os.ReadDir(dir)
			require.Empty(t, entries, "a refused restore leaves the directory empty")
		})
	}
	// The intact file restores.
	_, err := badgerstore.Restore(bg, bytes.NewReader(file), filepath.Join(t.TempDir(), "ok"), badgerstore.Options{})
	require.NoError(t, err)
}

// headerLen returns where the first chunk starts: magic, format, length,
// header, CRC.
func headerLen(t *testing.T, file []byte) int {
	t.Helper()
	require.Greater(t, len(file), 14)
	return 14 + int(file[10])<<24 + int(file[11])<<16 + int(file[12])<<8 + int(file[13]) + 4
}

func TestRestore_NonEmptyDir(t *testing.T) {
	file := smallBackup(t)
	dir := t.TempDir()
	keep := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(keep, []byte("mine"), 0o600))
	_, err := badgerstore.Restore(bg, bytes.NewReader(file), dir, badgerstore.Options{})
	require.ErrorIs(t, err, badgerstore.ErrDirNotEmpty)
	raw, err := os.ReadFile(keep)
	require.NoError(t, err)
	require.Equal(t, "mine", string(raw))
	entries, _ := os.ReadDir(dir)
	require.Len(t, entries, 1, "a refused restore touches nothing")
}

// TestRestore_NewIdentity checks that a restored store is a store of its
// own: a backup of it names another identity, and both open.
func TestRestore_NewIdentity(t *testing.T) {
	src := openStore(t, t.TempDir(), nil)
	var file bytes.Buffer
	first, err := src.Backup(bg, &file)
	require.NoError(t, err)
	dst := filepath.Join(t.TempDir(), "restored")
	_, err = badgerstore.Restore(bg, &file, dst, badgerstore.Options{})
	require.NoError(t, err)
	s := openStore(t, dst, nil)
	file.Reset()
	second, err := s.Backup(bg, &file)
	require.NoError(t, err)
	require.NotEmpty(t, second.Store)
	require.NotEqual(t, first.Store, second.Store)
}

func TestOpen_InterruptedRestore_ErrCorrupt(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "idem.restoring"), nil, 0o600))
	_, err := idem.Open(dir, nil)
	require.ErrorIs(t, err, backend.ErrCorrupt)
	require.Contains(t, err.Error(), "restore")
}

func TestStore_Backup_Closed(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	require.NoError(t, s.Close())
	_, err := s.Backup(bg, &bytes.Buffer{})
	require.ErrorIs(t, err, backend.ErrClosed)
}

// noBackup hides the Badger backend's Backup, as a backend without one.
type noBackup struct{ backend.Backend }

func TestStore_Backup_NotSupported(t *testing.T) {
	b, err := badgerstore.Open(t.TempDir(), badgerstore.Options{})
	require.NoError(t, err)
	s := idem.New(noBackup{b}, &idem.Options{SweepInterval: -1})
	defer s.Close()
	_, err = s.Backup(bg, &bytes.Buffer{})
	require.ErrorIs(t, err, idem.ErrNoBackup)
}

func TestStore_Backup_WriterFails(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	_, err := s.Backup(bg, failWriter{})
	require.ErrorIs(t, err, errDiskFull)
	require.NotErrorIs(t, err, backend.ErrUnavailable, "the destination failed, not the store")
}

var errDiskFull = errors.New("destination full")

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errDiskFull }

// BenchmarkStore_Backup backs up, and restores, a store of 100,000 done
// records with bodies of 200 bytes; bytes/s are the backup file's.
func BenchmarkStore_Backup(b *testing.B) {
	s := openStore(b, b.TempDir(), &idem.Options{Durability: backend.Fast})
	body := bytes.Repeat([]byte("x"), 200)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < 100_000; i += 8 {
				_, _, err := s.Do(bg, idem.Request{Key: fmt.Sprint("k", i)}, func(context.Context) (backend.Result, error) {
					return backend.Result{Status: 200, Body: body}, nil
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	var file bytes.Buffer
	b.Run("backup", func(b *testing.B) {
		for b.Loop() {
			file.Reset()
			if _, err := s.Backup(bg, &file); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(file.Len()))
	})
	b.Run("restore", func(b *testing.B) {
		for b.Loop() {
			if _, err := badgerstore.Restore(bg, bytes.NewReader(file.Bytes()), b.TempDir(), badgerstore.Options{}); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(file.Len()))
	})
}
