package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/pgstore"
	"github.com/stretchr/testify/require"
)

func lateCompletion(body string, now time.Time) backend.LateCompletion {
	return backend.LateCompletion{
		Completion:  backend.Completion{Result: result(body), At: now, ExpiresAt: now.Add(retention)},
		Fingerprint: "fp", Retention: retention, ClaimedAt: now, Owner: "late",
	}
}

// A late completion and a new claim race on a released or absent key,
// each from its own pool, as two instances do: exactly one of them goes
// first. Either the late result is recorded and the claim finds it done,
// or the claim wins and the late completion marks the key.
func TestBackend_CompleteLate_RacesAClaim(t *testing.T) {
	b0 := newBackend(t, pool(t), nil)
	late := newBackend(t, newPool(t, 4), &pgstore.Options{Table: tableName(b0)})
	claimer := newBackend(t, newPool(t, 4), &pgstore.Options{Table: tableName(b0)})
	now := epoch
	const rounds = 40
	outcomes := map[backend.LateOutcome]int{}
	for i := range rounds {
		key := fmt.Sprintf("k-%d", i)
		rec, _, err := b0.Claim(ctx, "s", key, claimArgs("fp", now))
		require.NoError(t, err)
		exp := now.Add(retention)
		if i%2 == 1 {
			exp = now // reclaimed below: the late completion finds the key absent
		}
		require.NoError(t, b0.Release(ctx, "s", key, rec.Token, backend.Releasing{At: now, ExpiresAt: exp}))
		if i%2 == 1 {
			_, err := b0.Reclaim(ctx, now, 10)
			require.NoError(t, err)
		}
		var (
			wg      sync.WaitGroup
			out     backend.LateOutcome
			claimed bool
			lateErr error
			claimEr error
		)
		wg.Add(2)
		go func() {
			defer wg.Done()
			out, lateErr = late.CompleteLate(ctx, "s", key, rec.Token, lateCompletion("late", now))
		}()
		go func() {
			defer wg.Done()
			_, claimed, claimEr = claimer.Claim(ctx, "s", key, claimArgs("fp", now))
		}()
		wg.Wait()
		require.NoError(t, lateErr)
		require.NoError(t, claimEr)
		got, err := b0.Get(ctx, "s", key)
		require.NoError(t, err)
		switch out {
		case backend.LateRecorded:
			require.False(t, claimed, "%s: the late result was recorded first: the claim must find it done", key)
			require.Equal(t, idem.StateDone, got.State)
			require.Equal(t, "late", string(got.Result.Body))
			require.False(t, got.MayHaveRunTwice)
		case backend.LateRanTwice:
			require.True(t, claimed, "%s: marked although nobody claimed it", key)
			require.Equal(t, idem.StateInProgress, got.State)
			require.True(t, got.MayHaveRunTwice)
		default:
			t.Fatalf("%s: outcome %d", key, out)
		}
		outcomes[out]++
	}
	t.Logf("of %d races: %d recorded late, %d marked", rounds, outcomes[backend.LateRecorded], outcomes[backend.LateRanTwice])
}

// Do through a Store on pgstore: a holder paused past its lease finishes
// after another instance's sweep released its claim and a third request
// claimed the key; the key is marked and inspect's story shows both.
func TestStore_LateCompletion_MarksAcrossInstances(t *testing.T) {
	b0 := newBackend(t, pool(t), nil)
	other := newBackend(t, newPool(t, 4), &pgstore.Options{Table: tableName(b0)})
	clock := idemtest.NewClock(epoch)
	notCommitted := idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})
	a := idem.New(b0, &idem.Options{Clock: clock, Lease: lease, SweepInterval: -1, Owner: "a", RecoveryGrace: -1})
	b := idem.New(other, &idem.Options{Clock: clock, Lease: lease, SweepInterval: -1, Owner: "b",
		Resolver: notCommitted, RecoveryGrace: -1})
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	r := idem.Request{Key: "k", Fingerprint: "fp"}
	running, resume := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, _, err := a.Do(ctx, r, func(context.Context) (idem.Result, error) {
			close(running)
			<-resume
			return result("late"), nil
		})
		done <- err
	}()
	<-running
	clock.Advance(lease)
	rep, err := b.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.NotCommitted)
	newer, _, err := b.Begin(ctx, r)
	require.NoError(t, err)
	require.NotNil(t, newer)
	close(resume)
	err = <-done
	require.ErrorIs(t, err, idem.ErrRanTwice)
	require.ErrorIs(t, err, idem.ErrOutcomeNotRecorded)
	require.NoError(t, newer.Complete(ctx, result("newer")))
	rec, err := b.Get(ctx, "", "k")
	require.NoError(t, err)
	require.True(t, rec.MayHaveRunTwice)
	require.Equal(t, "newer", string(rec.Result.Body))
	require.Len(t, rec.Attempts, 2)
	require.Equal(t, "completed late: may have run twice", rec.Attempts[0].Outcome)
	require.Equal(t, "completed", rec.Attempts[1].Outcome)
	require.Equal(t, newer.Token(), rec.Attempts[1].Token)
}
