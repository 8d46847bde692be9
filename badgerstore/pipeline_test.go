package badgerstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/internal/badger"
	"github.com/stretchr/testify/require"
)

// TestBadger_Pipeline_UnderContention drives the committer's pipeline hard:
// many goroutines claim, complete, release, extend and count a few keys
// while reclaim runs, so that nearly every op reads a key the unit being
// synced wrote. Nothing may fail but the fencing and claim outcomes the
// contract gives, each key holds at most one live claim at a time, and a
// reopen sees what the last answers said.
func TestBadger_Pipeline_UnderContention(t *testing.T) {
	for _, d := range []backend.Durability{backend.Durable, backend.Fast} {
		t.Run(d.String(), func(t *testing.T) {
			dir := t.TempDir()
			b, err := Open(dir, Options{Durability: d})
			require.NoError(t, err)
			ctx := context.Background()
			keys := []string{"k0", "k1", "k2", "k3"}
			var mu sync.Mutex
			holder := map[string]uint64{}      // key -> token of the live claim
			last := map[string]backend.State{} // key -> state after the last answered write
			now := time.Now()
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for g := range 24 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 7))
					for range 120 {
						k := keys[rng.IntN(len(keys))]
						rec, claimed, err := b.Claim(ctx, "", k, backend.ClaimArgs{Now: now, LeaseEnds: now.Add(time.Hour)})
						if err != nil {
							errs <- fmt.Errorf("claim %s: %w", k, err)
							return
						}
						if !claimed {
							if rec.State != backend.StateInProgress && rec.State != backend.StateDone {
								errs <- fmt.Errorf("claim %s refused by a %v record", k, rec.State)
								return
							}
							continue
						}
						mu.Lock()
						if tok, ok := holder[k]; ok {
							mu.Unlock()
							errs <- fmt.Errorf("key %s claimed with token %d while %d holds it", k, rec.Token, tok)
							return
						}
						holder[k] = rec.Token
						mu.Unlock()
						if rng.IntN(3) == 0 {
							if err := b.Extend(ctx, "", k, rec.Token, now.Add(2*time.Hour)); err != nil {
								errs <- fmt.Errorf("extend %s: %w", k, err)
								return
							}
						}
						mu.Lock()
						delete(holder, k)
						mu.Unlock()
						if rng.IntN(2) == 0 {
							err = b.Release(ctx, "", k, rec.Token, backend.Releasing{At: now, ExpiresAt: now.Add(time.Hour), Reason: "test"})
							if err == nil {
								mu.Lock()
								last[k] = backend.StateReleased
								mu.Unlock()
							}
						} else {
							// Done records expire at once, so that the key
							// can be claimed again and reclaimed.
							err = b.Complete(ctx, "", k, rec.Token, backend.Completion{Result: backend.Result{Status: 200}, At: now, ExpiresAt: now})
							if err == nil {
								mu.Lock()
								last[k] = backend.StateDone
								mu.Unlock()
							}
						}
						if err != nil {
							errs <- fmt.Errorf("end %s: %w", k, err)
							return
						}
					}
				}()
			}
			stop := make(chan struct{})
			side := make(chan error, 1)
			go func() {
				for {
					select {
					case <-stop:
						side <- nil
						return
					default:
					}
					if _, err := b.Reclaim(ctx, now, 16); err != nil {
						side <- fmt.Errorf("reclaim: %w", err)
						return
					}
					if err := b.AddTallies(ctx, []backend.Tally{{Key: "k1", Replays: 1, LastReplay: now}}); err != nil {
						side <- fmt.Errorf("tally: %w", err)
						return
					}
				}
			}()
			wg.Wait()
			close(stop)
			require.NoError(t, <-side)
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.NoError(t, b.Close())

			b, err = Open(dir, Options{Durability: d})
			require.NoError(t, err)
			defer b.Close()
			for k, st := range last {
				rec, err := b.Get(ctx, "", k)
				if st == backend.StateDone && err != nil {
					continue // expired at once, and maybe reclaimed
				}
				require.NoError(t, err, k)
				require.NotEqual(t, backend.StateInProgress, rec.State, "key %s: every claim ended", k)
			}
		})
	}
}

// TestBadger_Pipeline_OpenClaimsAreReadFromMemory checks that the writers and the
// sweep read an open claim's record from the open claims, as last made
// durable, and not from Badger: a claim's record is overwritten in Badger
// behind the store's back, and Stale, a count, an extension and the
// completion still see the record the store wrote, counts included.
func TestBadger_Pipeline_OpenClaimsAreReadFromMemory(t *testing.T) {
	b, err := Open(t.TempDir(), Options{})
	require.NoError(t, err)
	defer b.Close()
	ctx := context.Background()
	now := time.Now()
	rec, claimed, err := b.Claim(ctx, "s", "k", backend.ClaimArgs{Fingerprint: "fp", Now: now, LeaseEnds: now.Add(-time.Second), Retention: time.Hour})
	require.NoError(t, err)
	require.True(t, claimed)
	require.NoError(t, b.AddTallies(ctx, []backend.Tally{{Scope: "s", Key: "k", Conflicts: 2, LastRejection: now}}))
	require.NoError(t, b.eng.View(func(*badger.Txn) error { return nil })) // Badger holds both writes

	// What Badger holds now is not what a writer must read.
	require.NoError(t, b.eng.DB().Update(func(txn *badger.Txn) error {
		return txn.Set(withPrefix(prefixRecord, recordID("s", "k")), []byte("not a record"))
	}))

	stale, err := b.Stale(ctx, now, 10)
	require.NoError(t, err)
	require.Len(t, stale, 1)
	require.Equal(t, rec.Token, stale[0].Token)
	require.Equal(t, int64(2), stale[0].Conflicts, "the counts added to the open claim")

	require.NoError(t, b.Extend(ctx, "s", "k", rec.Token, now.Add(time.Hour)))
	stale, err = b.Stale(ctx, now, 10)
	require.NoError(t, err)
	require.Empty(t, stale, "the extended lease is what Stale reads")

	seen, claimed, err := b.Claim(ctx, "s", "k", backend.ClaimArgs{Fingerprint: "fp", Now: now, LeaseEnds: now.Add(time.Minute), Retention: time.Hour})
	require.NoError(t, err)
	require.False(t, claimed)
	require.Equal(t, rec.Token, seen.Token)
	require.Equal(t, int64(2), seen.Conflicts)

	require.NoError(t, b.Complete(ctx, "s", "k", rec.Token, backend.Completion{
		Result: backend.Result{Status: 200, Body: []byte("ok")}, At: now, ExpiresAt: now.Add(time.Hour)}))
	got, err := b.Get(ctx, "s", "k")
	require.NoError(t, err)
	require.Equal(t, backend.StateDone, got.State)
	require.Equal(t, int64(2), got.Conflicts, "the completion kept the counts")
	require.Equal(t, "ok", string(got.Result.Body))
	b.mu.Lock()
	require.Empty(t, b.open, "a done record is no open claim")
	b.mu.Unlock()
}

func TestSplitRecordID(t *testing.T) {
	for _, id := range []struct{ scope, key string }{{"", "k"}, {"tenant", "k-1"}, {strings.Repeat("s", backend.MaxScopeLen), "k"}} {
		if scope, key := splitRecordID(recordID(id.scope, id.key)); scope != id.scope || key != id.key {
			t.Fatalf("%+v: split into %q, %q", id, scope, key)
		}
	}
}
