package pgstore_test

import (
	"fmt"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/pgstore"
	"github.com/stretchr/testify/require"
)

// Claim reads first once most recent answers were replays, and goes back
// to the batch once most were fresh claims; either way the answers are
// the same.
func TestClaim_ReadFirstFollowsTheMix(t *testing.T) {
	b := newBackend(t, pool(t), nil)
	t.Cleanup(func() { _ = b.Close() })
	rec, claimed, err := b.Claim(ctx, "s", "done", claimArgs("fp", epoch))
	require.NoError(t, err)
	require.True(t, claimed)
	require.NoError(t, b.Complete(ctx, "s", "done", rec.Token, backend.Completion{Result: result("r"), At: epoch,
		ExpiresAt: epoch.Add(retention)}))
	require.False(t, pgstore.ReadsFirst(b), "a new Backend claims with the batch")

	for i := 0; !pgstore.ReadsFirst(b); i++ {
		require.Less(t, i, 100, "still not reading first after 100 replays")
		rec, claimed, err := b.Claim(ctx, "s", "done", claimArgs("fp", epoch))
		require.NoError(t, err)
		require.False(t, claimed)
		require.Equal(t, "r", string(rec.Result.Body))
	}
	// Reading first: a replay, an open claim and a fresh key all get
	// their answer.
	rec, claimed, err = b.Claim(ctx, "s", "done", claimArgs("fp", epoch))
	require.NoError(t, err)
	require.False(t, claimed)
	require.Equal(t, idem.StateDone, rec.State)
	for i := 0; pgstore.ReadsFirst(b); i++ {
		require.Less(t, i, 100, "still reading first after 100 fresh claims")
		key := fmt.Sprintf("fresh%d", i)
		_, claimed, err := b.Claim(ctx, "s", key, claimArgs("fp", epoch))
		require.NoError(t, err)
		require.True(t, claimed, key)
		rec, claimed, err = b.Claim(ctx, "s", key, claimArgs("fp", epoch))
		require.NoError(t, err)
		require.False(t, claimed, "an open claim read first")
		require.Equal(t, idem.StateInProgress, rec.State)
		_, claimed, err = b.Claim(ctx, "s", key+"x", claimArgs("fp", epoch))
		require.NoError(t, err)
		require.True(t, claimed)
	}
}

// A brief read first (backend.ClaimArgs.Brief, as Store.Begin claims) answers
// a done key with what a replay reads, and leaves an open claim to the
// batch, which returns it whole.
func TestClaim_BriefReadFirst(t *testing.T) {
	b := newBackend(t, pool(t), nil)
	t.Cleanup(func() { _ = b.Close() })
	pgstore.SetReadFirst(b, "always")
	brief := func(fp string) backend.ClaimArgs {
		a := claimArgs(fp, epoch)
		a.Brief = true
		return a
	}
	rec, claimed, err := b.Claim(ctx, "s", "k", brief("fp"))
	require.NoError(t, err)
	require.True(t, claimed)
	open, claimed, err := b.Claim(ctx, "s", "k", brief("fp"))
	require.NoError(t, err)
	require.False(t, claimed)
	require.Equal(t, idem.StateInProgress, open.State)
	require.Equal(t, 1, open.Claims, "an open claim comes whole")
	require.Len(t, open.Attempts, 1)
	require.True(t, open.LeaseEnds.Equal(rec.LeaseEnds))

	require.NoError(t, b.Complete(ctx, "s", "k", rec.Token, backend.Completion{Result: result("r"), At: epoch,
		ExpiresAt: epoch.Add(retention)}))
	whole, err := b.Get(ctx, "s", "k")
	require.NoError(t, err)
	done, claimed, err := b.Claim(ctx, "s", "k", brief("other"))
	require.NoError(t, err)
	require.False(t, claimed)
	require.Equal(t, &idem.Record{Format: whole.Format, Scope: "s", Key: "k", State: idem.StateDone,
		Fingerprint: "fp", Token: whole.Token, ExpiresAt: whole.ExpiresAt, Result: whole.Result}, done)

	// Expired: the brief read leaves it to the batch, which claims.
	late := brief("fp")
	late.Now = epoch.Add(retention)
	late.LeaseEnds = late.Now.Add(lease)
	again, claimed, err := b.Claim(ctx, "s", "k", late)
	require.NoError(t, err)
	require.True(t, claimed)
	require.Greater(t, again.Token, rec.Token)
}

// Claim sends its INSERT alone while almost every recent claim claimed: a
// fresh key is claimed with it, and a key that exists (an open claim, a
// done record, a released one) gets the batch's answer after it. Two
// answers that were no claim take the Backend back to the batch.
func TestClaim_InsertFirst(t *testing.T) {
	b := newBackend(t, pool(t), nil)
	t.Cleanup(func() { _ = b.Close() })
	require.True(t, pgstore.InsertsFirst(b), "a new Backend claims with the INSERT alone")
	pgstore.SetReadFirst(b, "insert")

	rec, claimed, err := b.Claim(ctx, "s", "k", claimArgs("fp", epoch))
	require.NoError(t, err)
	require.True(t, claimed)
	require.Len(t, rec.Attempts, 1)
	// The INSERT returns the token alone; the record Claim builds is the
	// row as read back, on both paths.
	stored, err := b.Get(ctx, "s", "k")
	require.NoError(t, err)
	require.Equal(t, stored, rec)
	batch := newBackend(t, pool(t), &pgstore.Options{Table: tableName(b)})
	t.Cleanup(func() { _ = batch.Close() })
	pgstore.SetReadFirst(batch, "never")
	viaBatch, claimed, err := batch.Claim(ctx, "s", "k2", claimArgs("fp", epoch))
	require.NoError(t, err)
	require.True(t, claimed)
	stored, err = b.Get(ctx, "s", "k2")
	require.NoError(t, err)
	require.Equal(t, stored, viaBatch)

	open, claimed, err := b.Claim(ctx, "s", "k", claimArgs("fp", epoch))
	require.NoError(t, err)
	require.False(t, claimed)
	require.Equal(t, idem.StateInProgress, open.State)
	require.Equal(t, rec.Token, open.Token)

	require.NoError(t, b.Release(ctx, "s", "k", rec.Token, backend.Releasing{At: epoch, ExpiresAt: epoch.Add(retention)}))
	again, claimed, err := b.Claim(ctx, "s", "k", claimArgs("fp", epoch))
	require.NoError(t, err)
	require.True(t, claimed, "a released key is taken over")
	require.Greater(t, again.Token, rec.Token)
	require.Equal(t, 2, again.Claims)

	require.NoError(t, b.Complete(ctx, "s", "k", again.Token, backend.Completion{Result: result("r"), At: epoch,
		ExpiresAt: epoch.Add(retention)}))
	done, claimed, err := b.Claim(ctx, "s", "k", claimArgs("fp", epoch))
	require.NoError(t, err)
	require.False(t, claimed)
	require.Equal(t, "r", string(done.Result.Body))

	auto := newBackend(t, pool(t), &pgstore.Options{Table: tableName(b)})
	t.Cleanup(func() { _ = auto.Close() })
	for range 2 {
		_, claimed, err := auto.Claim(ctx, "s", "k", claimArgs("fp", epoch))
		require.NoError(t, err)
		require.False(t, claimed)
	}
	require.False(t, pgstore.InsertsFirst(auto), "two replays take the Backend back to the batch")
}
