package pgstore_test

import (
	"fmt"
	"testing"

	"github.com/idemkit/idem"
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
	require.NoError(t, b.Complete(ctx, "s", "done", rec.Token, idem.Completion{Result: result("r"), At: epoch,
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
