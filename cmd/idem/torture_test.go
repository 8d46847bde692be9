package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/stretchr/testify/require"
)

// TestTorture_Child is the body of the torture's child processes when the
// test binary runs itself; it returns at once in any other process.
func TestTorture_Child(t *testing.T) {
	env := os.Getenv(tortureChildEnv)
	if env == "" {
		return
	}
	err := tortureChildMain(context.Background(), env, os.Stderr)
	t.Fatalf("the torture child was not killed: %v", err)
}

// TestRunTorture kills three children mid-traffic and checks that the run
// found no violation and that it did what it claims: killed, executed,
// acknowledged, replayed, recovered orphans through the Resolver.
func TestRunTorture(t *testing.T) {
	var stderr bytes.Buffer
	cfg := tortureConfig{
		Cycles: 3, Dir: t.TempDir(), Workers: 8, Keys: 64, Seed: 5, Sample: 50, FullEvery: 2,
		// Each child dies right after its 300th acknowledgement, with its
		// other workers inside Do.
		KillAfterAcks: 300, KillMin: time.Millisecond, KillMax: time.Millisecond,
		Child:  []string{os.Args[0], "-test.run=^TestTorture_Child$", "-test.count=1"},
		Stderr: &stderr,
	}
	rep, err := runTorture(context.Background(), cfg)
	require.NoError(t, err, stderr.String())
	t.Logf("%+v", *rep)
	require.Zero(t, rep.Violations, "%v\n%s", rep.Messages, stderr.String())
	require.Equal(t, 3, rep.Cycles)
	require.Zero(t, rep.KilledBeforeOpen)
	require.GreaterOrEqual(t, rep.Acks, 3*300)
	require.Positive(t, rep.Executed)
	require.Positive(t, rep.Replayed)
	require.GreaterOrEqual(t, rep.Executions, rep.Executed)
	require.Positive(t, rep.Orphans)
	// The parent resolves every orphan it finds; the children resolve
	// those their sweeps reach first.
	require.GreaterOrEqual(t, rep.ResolvedCommitted+rep.ResolvedNotCommitted, rep.Orphans)
	// The second check and the final one replayed every acknowledged key.
	require.Equal(t, 2, rep.FullChecks)
	require.GreaterOrEqual(t, rep.ReplaysVerified, rep.AckedKeys)
	require.Positive(t, rep.AckedKeys)
}

// tortureStore writes key's effect through Do into a new store and its
// ledger, as a child does, and closes the store.
func tortureStore(t *testing.T, keys ...string) (dir, ledger string) {
	t.Helper()
	root := t.TempDir()
	dir, ledger = filepath.Join(root, "store"), filepath.Join(root, "ledger")
	s, err := idem.Open(dir, &idem.Options{SweepInterval: -1})
	require.NoError(t, err)
	for _, key := range keys {
		_, _, err := s.Do(context.Background(), tortureRequest(key), func(ctx context.Context) (idem.Result, error) {
			c, _ := idem.ClaimFromContext(ctx)
			appendLedger(t, ledger, key, c.Token())
			return tortureResult(key, c.Token()), nil
		})
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	return dir, ledger
}

func appendLedger(t *testing.T, ledger, key string, token uint64) {
	t.Helper()
	f, err := os.OpenFile(ledger, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	require.NoError(t, err)
	_, err = fmt.Fprintf(f, "%s %d %d\n", key, token, len(tortureBody(key, token)))
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

func storedToken(t *testing.T, dir, key string) uint64 {
	t.Helper()
	s, err := idem.Open(dir, &idem.Options{SweepInterval: -1})
	require.NoError(t, err)
	defer s.Close()
	rec, err := s.Get(context.Background(), tortureScope, key)
	require.NoError(t, err)
	return rec.Token
}

func tortureAcks(keyTokens map[string]uint64) map[string][32]byte {
	acks := map[string][32]byte{}
	for key, token := range keyTokens {
		acks[key] = sha256.Sum256(tortureBody(key, token))
	}
	return acks
}

// TestVerifyStore_Violations feeds the parent's check stores and ledgers
// that break each rule, and a sound one: the check can fail, both the
// per-cycle one (the keys a child touched) and the full one.
func TestVerifyStore_Violations(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(fmt.Sprintf("full=%v", full), func(t *testing.T) { testVerifyStore(t, full) })
	}
}

func testVerifyStore(t *testing.T, full bool) {
	ctx := context.Background()
	// Every key the cases use: the per-cycle check looks at the keys it
	// is given (those a child reported on and new ledger lines).
	touched := []string{"t-1", "t-2", "t-3", "t-5", "t-6"}
	check := func(t *testing.T, dir, ledger string, acks map[string][32]byte, replay ...string) ([]string, []string, verifyStats) {
		t.Helper()
		idx := newLedgerIndex(ledger)
		_, dups, err := idx.catchUp()
		require.NoError(t, err)
		var st verifyStats
		v, err := verifyStore(ctx, verifyInput{Dir: dir, Ledger: idx.lines, Acks: acks, Check: touched, Replay: replay,
			Recover: true, Full: full}, &st)
		require.NoError(t, err)
		return dups, v, st
	}
	requireViolation := func(t *testing.T, v []string, want string) {
		t.Helper()
		for _, s := range v {
			if strings.Contains(s, want) {
				return
			}
		}
		t.Fatalf("no violation says %q: %q", want, v)
	}

	t.Run("sound", func(t *testing.T) {
		dir, ledger := tortureStore(t, "t-1", "t-2")
		acks := tortureAcks(map[string]uint64{"t-1": storedToken(t, dir, "t-1")})
		dups, v, st := check(t, dir, ledger, acks, "t-1")
		require.Empty(t, dups)
		require.Empty(t, v)
		require.Equal(t, 1, st.Replays)
	})
	t.Run("effect booked twice", func(t *testing.T) {
		dir, ledger := tortureStore(t, "t-1")
		appendLedger(t, ledger, "t-1", 999)
		dups, _, _ := check(t, dir, ledger, nil)
		require.Equal(t, []string{"t-1"}, dups)
	})
	t.Run("acknowledged result differs", func(t *testing.T) {
		dir, ledger := tortureStore(t, "t-1")
		acks := tortureAcks(map[string]uint64{"t-1": storedToken(t, dir, "t-1") + 1})
		_, v, _ := check(t, dir, ledger, acks, "t-1")
		requireViolation(t, v, "t-1: acknowledged, but Do returned another result")
		requireViolation(t, v, "t-1: acknowledged, but the record (done) does not hold the acknowledged result")
		requireViolation(t, v, "t-1: acknowledged, but the ledger does not hold the acknowledged result")
	})
	t.Run("acknowledged key lost", func(t *testing.T) {
		dir, ledger := tortureStore(t, "t-1")
		acks := tortureAcks(map[string]uint64{"t-2": 7})
		_, v, _ := check(t, dir, ledger, acks, "t-2")
		requireViolation(t, v, "t-2: acknowledged, but the store has no record")
		requireViolation(t, v, "t-2: acknowledged, but Do ran its effect again")
	})
	t.Run("booked effect without record", func(t *testing.T) {
		dir, ledger := tortureStore(t, "t-1")
		appendLedger(t, ledger, "t-3", 42)
		_, v, _ := check(t, dir, ledger, nil)
		requireViolation(t, v, "t-3: its effect is booked but the store has no record")
	})
	t.Run("done without effect", func(t *testing.T) {
		dir, _ := tortureStore(t, "t-1")
		_, v, _ := check(t, dir, filepath.Join(t.TempDir(), "empty-ledger"), nil)
		requireViolation(t, v, "t-1 is done with no effect booked")
	})
	t.Run("orphan resolved", func(t *testing.T) {
		dir, ledger := tortureStore(t, "t-1")
		token := leaveClaim(t, dir, "t-5")
		appendLedger(t, ledger, "t-5", token)
		_, v, st := check(t, dir, ledger, nil)
		require.Empty(t, v)
		require.Equal(t, verifyStats{Orphans: []string{fmt.Sprintf("t-5/%d", token)}, Committed: 1}, st)
	})
	t.Run("claim left open", func(t *testing.T) {
		dir, ledger := tortureStore(t, "t-1")
		token := leaveClaim(t, dir, "t-6")
		// An earlier claim's effect is booked: the Resolver refuses this one.
		appendLedger(t, ledger, "t-6", token-1)
		_, v, _ := check(t, dir, ledger, nil)
		requireViolation(t, v, "recovery left claims unsettled")
		requireViolation(t, v, fmt.Sprintf("t-6/%d left in_progress", token))
	})
	t.Run("orphan left for the next child", func(t *testing.T) {
		dir, ledger := tortureStore(t, "t-1")
		token := leaveClaim(t, dir, "t-7")
		idx := newLedgerIndex(ledger)
		_, _, err := idx.catchUp()
		require.NoError(t, err)
		var st verifyStats
		v, err := verifyStore(ctx, verifyInput{Dir: dir, Ledger: idx.lines}, &st)
		require.NoError(t, err)
		require.Empty(t, v)
		require.Equal(t, []string{fmt.Sprintf("t-7/%d", token)}, st.Orphans)

		appendLedger(t, ledger, "t-7", token+5)
		_, _, err = idx.catchUp()
		require.NoError(t, err)
		v, err = verifyStore(ctx, verifyInput{Dir: dir, Ledger: idx.lines}, &st)
		require.NoError(t, err)
		requireViolation(t, v, fmt.Sprintf("t-7/%d: claim open, but an earlier claim's effect is booked", token))
	})
}

// leaveClaim claims key and closes the store with the claim open, as a
// kill leaves it.
func leaveClaim(t *testing.T, dir, key string) uint64 {
	t.Helper()
	s, err := idem.Open(dir, &idem.Options{SweepInterval: -1, CloseTimeout: time.Millisecond})
	require.NoError(t, err)
	c, _, err := s.Begin(context.Background(), tortureRequest(key))
	require.NoError(t, err)
	require.NotNil(t, c)
	_ = s.Close() // gives up on the open claim: it stays in progress
	return c.Token()
}

// TestTortureRun_TakeReports: an acknowledgement that changes is a
// violation, and a child's violation line is counted.
func TestTortureRun_TakeReports(t *testing.T) {
	r := &tortureRun{cfg: tortureConfig{Sample: 10}, rep: &tortureReport{}, acks: map[string][32]byte{}, rng: rand.New(rand.NewPCG(1, 2))}
	a, b := sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))
	replay, touched := r.takeReports([]string{
		"o", "a t-1 x " + hex.EncodeToString(a[:]), "a t-1 r " + hex.EncodeToString(a[:]),
		"f t-7", "b t-2", "c t-3 1", "c t-4 0",
	})
	require.Equal(t, []string{"t-1"}, replay)
	require.Equal(t, []string{"t-1", "t-1", "t-7", "t-2", "t-3", "t-4"}, touched)
	require.Zero(t, r.rep.Violations)
	require.Equal(t, 8, r.base)
	require.Equal(t, tortureReport{DoCalls: 4, Executed: 1, Replayed: 1, Failed: 1, Busy: 1, Acks: 2,
		ResolvedCommitted: 1, ResolvedNotCommitted: 1, ResolvedInChildren: 2}, *r.rep)

	_, _ = r.takeReports([]string{"a t-1 r " + hex.EncodeToString(b[:]), "v t-9: Do: boom"})
	require.Equal(t, 2, r.rep.Violations)
	require.Equal(t, []string{"t-1: acknowledged with two different results", "child: t-9: Do: boom"}, r.rep.Messages)
}

// TestLedgerIndex_TornTail: a line the kill cut is no effect; it is cut
// off the file, and later lines are read after it.
func TestLedgerIndex_TornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	whole := fmt.Sprintf("t-1 5 %d\n", len(tortureBody("t-1", 5)))
	require.NoError(t, os.WriteFile(path, []byte(whole+"t-2 7 4"), 0o644))
	idx := newLedgerIndex(path)
	added, dups, err := idx.catchUp()
	require.NoError(t, err)
	require.Empty(t, dups)
	require.Equal(t, []string{"t-1"}, added)
	require.Equal(t, 1, idx.total)
	require.Equal(t, 2, idx.next)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, whole, string(data))

	appendLedger(t, path, "t-1", 6)
	_, dups, err = idx.catchUp()
	require.NoError(t, err)
	require.Equal(t, []string{"t-1"}, dups)
	require.Len(t, idx.lines["t-1"], 2)

	require.NoError(t, os.WriteFile(path, []byte("t-1 5 3\n"), 0o644))
	_, _, err = newLedgerIndex(path).catchUp()
	require.ErrorContains(t, err, "the result has")
}

func TestTortureCommand_Usage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"torture", "-kill-every", "2s-1s"}, "0 < MIN <= MAX"},
		{[]string{"torture", "-workers", "0"}, "-workers must be 1 to 1024"},
		{[]string{"torture", "-duration", "0"}, "-duration or -cycles must be positive"},
		{[]string{"torture", "a", "b"}, `want "idem torture [DIR]" or "idem torture -dir DIR"; got 2 arguments`},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), tc.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("run %q: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.stderr)
		}
	}
}
