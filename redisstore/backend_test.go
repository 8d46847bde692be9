package redisstore_test

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/redisstore"
	"github.com/idemkit/idem/redisstore/redistest"
	"github.com/redis/go-redis/v9"
)

func claimArgs(now time.Time) backend.ClaimArgs {
	return backend.ClaimArgs{Fingerprint: "fp", Now: now, LeaseEnds: now.Add(10 * time.Second), Retention: time.Hour}
}

// keysOf lists the server's keys under prefix.
func keysOf(t *testing.T, c *redis.Client, prefix string) []string {
	ks, err := c.Keys(ctx, "*"+prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func TestBackend_Keys_OneSlotPerRecordAndItsIndexes(t *testing.T) {
	c := client(t)
	b := newBackend(t, c, nil)
	now := time.Now()
	rec, _, err := b.Claim(ctx, "tenant", "k", claimArgs(now))
	if err != nil {
		t.Fatal(err)
	}
	// A Cluster hashes only the {tag} of a key: the record and the
	// indexes and counter its scripts touch share one.
	var recKey string
	for _, k := range keysOf(t, c, b.Prefix()) {
		if strings.Contains(k, ":r:") {
			recKey = k
		}
	}
	if recKey == "" {
		t.Fatal("no record key")
	}
	tag := recKey[:strings.Index(recKey, "}")+1]
	for _, suffix := range []string{":stale", ":ver"} {
		if n, _ := c.Exists(ctx, tag+suffix).Result(); n != 1 {
			t.Fatalf("%s%s missing beside the record %q", tag, suffix, recKey)
		}
	}
	// An open claim has no TTL; a done record has its retention plus the
	// margin, on the server's clock.
	if ttl, _ := c.PTTL(ctx, recKey).Result(); ttl != -1 {
		t.Fatalf("an open claim's TTL is %v, want none", ttl)
	}
	if err := b.Complete(ctx, "tenant", "k", rec.Token, backend.Completion{Result: backend.Result{Status: 200}, At: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	ttl, _ := c.PTTL(ctx, recKey).Result()
	if ttl < time.Hour || ttl > time.Hour+time.Minute {
		t.Fatalf("a done record's TTL is %v, want an hour and up to a minute", ttl)
	}
	if n, _ := c.ZCard(ctx, tag+":stale").Result(); n != 0 {
		t.Fatalf("a done record is still in the stale index")
	}
	if n, _ := c.ZCard(ctx, tag+":exp").Result(); n != 1 {
		t.Fatalf("a done record is not in the expiry index")
	}
}

func TestBackend_Claim_TokensGrow(t *testing.T) {
	c := client(t)
	b := newBackend(t, c, nil)
	now := time.Now()
	var last uint64
	for i := range 600 { // past an epoch's 255 tokens
		rec, claimed, err := b.Claim(ctx, "s", "k", claimArgs(now))
		if err != nil || !claimed {
			t.Fatalf("claim %d: %v %v", i, claimed, err)
		}
		if rec.Token <= last {
			t.Fatalf("token %d after %d", rec.Token, last)
		}
		if rec.Token >= 1<<53 {
			t.Fatalf("token %d is not exact in a float64", rec.Token)
		}
		last = rec.Token
		if err := b.Release(ctx, "s", "k", rec.Token, backend.Releasing{At: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
}

// A replica promoted after missing the last claims draws tokens above
// every token the old primary drew: its epoch is a new one.
func TestBackend_Claim_TokensNeverRepeatAfterPromotion(t *testing.T) {
	primary := client(t)
	replica, err := redistest.Start(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(replica.Stop)
	rc := replica.Client()
	t.Cleanup(func() { _ = rc.Close() })
	prefix := fmt.Sprintf("promo%d", os.Getpid())
	b := newBackend(t, primary, &redisstore.Options{Prefix: prefix})
	claim := uniqueClaims(t)
	for i := range 20 {
		claim(b, fmt.Sprint("a", i))
	}
	// The replica copies the primary as it is now, and misses what follows.
	host, port, _ := net.SplitHostPort(server.Addr)
	if err := rc.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		info, _ := rc.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	if err := primary.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.ReplicaOf(ctx, "no", "one").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		claim(b, fmt.Sprint("b", i)) // the old primary goes on: lost in the failover
	}
	nb := newBackend(t, rc, &redisstore.Options{Prefix: prefix})
	for i := range 20 {
		claim(nb, fmt.Sprint("b", i)) // the same keys, the same shards, on the promoted replica
	}
}

// A server restarted from a snapshot older than its last claims (a
// store opened Fast on a server without appendfsync always) draws tokens
// above every token it drew before: its replication id is a new one, and
// so is its epoch.
func TestBackend_Claim_TokensNeverRepeatAfterRestart(t *testing.T) {
	needServer(t)
	srv, err := redistest.Start(ctx, &redistest.Options{Settings: []string{"appendonly no"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	open := func() *redisstore.Backend {
		c := srv.Client()
		t.Cleanup(func() { _ = c.Close() })
		return newBackend(t, c, &redisstore.Options{Prefix: "restart", Durability: backend.Fast})
	}
	b := open()
	claim := uniqueClaims(t)
	for i := range 20 {
		claim(b, fmt.Sprint("a", i))
	}
	if err := b.Client().Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		claim(b, fmt.Sprint("b", i)) // after the snapshot: lost in the crash
	}
	srv.Kill()
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	nb := open()
	for i := range 20 {
		claim(nb, fmt.Sprint("b", i)) // the same keys, as the snapshot left their shards
	}
}

// uniqueClaims returns a function that claims a key with a Backend and
// fails t when its token was drawn before, by any Backend it was given.
func uniqueClaims(t *testing.T) func(b *redisstore.Backend, key string) {
	now := time.Now()
	tokens := map[uint64]string{}
	return func(b *redisstore.Backend, key string) {
		t.Helper()
		rec, claimed, err := b.Claim(ctx, "s", key, claimArgs(now))
		if err != nil || !claimed {
			t.Fatalf("claim %s: %v %v", key, claimed, err)
		}
		if k, ok := tokens[rec.Token]; ok {
			t.Fatalf("token %d drawn twice: for %s and again for %s", rec.Token, k, key)
		}
		tokens[rec.Token] = key
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for range 500 {
		if ok() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("timed out")
}

func TestBackend_Reclaim_ServerExpiredRecordsLeaveNoEntries(t *testing.T) {
	c := client(t)
	b := newBackend(t, c, nil)
	now := time.Now()
	rec, _, err := b.Claim(ctx, "s", "gone", claimArgs(now))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Complete(ctx, "s", "gone", rec.Token, backend.Completion{At: now, ExpiresAt: now.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	deleteByHand(t, c, b.Prefix(), "s\x00gone") // as its TTL would
	refs, err := b.Reclaim(ctx, now.Add(2*time.Minute), 10)
	if err != nil || len(refs) != 0 {
		t.Fatalf("Reclaim = %v, %v; want nothing it deleted", refs, err)
	}
	noEntries(t, c, b.Prefix(), ":exp")
}

// deleteByHand deletes the record key of member under prefix.
func deleteByHand(t *testing.T, c *redis.Client, prefix, member string) {
	t.Helper()
	deleted := 0
	for _, k := range keysOf(t, c, prefix) {
		if strings.HasSuffix(k, ":r:"+member) {
			deleted += int(c.Del(ctx, k).Val())
		}
	}
	if deleted != 1 {
		t.Fatalf("deleted %d keys", deleted)
	}
}

// noEntries fails unless every index of kind (":exp", ":stale") under
// prefix is empty.
func noEntries(t *testing.T, c *redis.Client, prefix, kind string) {
	t.Helper()
	for _, k := range keysOf(t, c, prefix) {
		if strings.HasSuffix(k, kind) {
			if n, _ := c.ZCard(ctx, k).Result(); n != 0 {
				t.Fatalf("%s keeps %d entries", k, n)
			}
		}
	}
}

func TestBackend_Stale_DropsEntriesOfDeletedRecords(t *testing.T) {
	c := client(t)
	b := newBackend(t, c, nil)
	now := time.Now()
	if _, _, err := b.Claim(ctx, "s", "gone", claimArgs(now)); err != nil {
		t.Fatal(err)
	}
	deleteByHand(t, c, b.Prefix(), "s\x00gone")
	recs, err := b.Stale(ctx, now.Add(time.Hour), 10)
	if err != nil || len(recs) != 0 {
		t.Fatalf("Stale = %v, %v", recs, err)
	}
	noEntries(t, c, b.Prefix(), ":stale")
}

func TestBackend_Reclaim_WithinTheMillisecondOfExpiry(t *testing.T) {
	c := client(t)
	b := newBackend(t, c, nil)
	now := time.Date(2026, 1, 2, 3, 4, 5, 100_000, time.UTC) // 0.1 ms past a millisecond
	rec, _, err := b.Claim(ctx, "s", "k", claimArgs(now))
	if err != nil {
		t.Fatal(err)
	}
	exp := now.Add(500 * time.Microsecond) // the same millisecond
	if err := b.Complete(ctx, "s", "k", rec.Token, backend.Completion{At: now, ExpiresAt: exp}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		refs, err := b.Reclaim(ctx, now, 10)
		if err != nil || len(refs) != 0 {
			t.Errorf("Reclaim before expiry = %v, %v", refs, err)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Reclaim spins on an entry due by its millisecond but not yet expired")
	}
	refs, err := b.Reclaim(ctx, exp, 10)
	if err != nil || len(refs) != 1 {
		t.Fatalf("Reclaim at expiry = %v, %v", refs, err)
	}
}

// A released record is claimed over with its counts, whether Claim wrote
// first or read first (after replays, it reads the bytes, version and
// token alone, and reads a record it claims over again, whole).
func TestBackend_Claim_OverReleasedKeepsCounts(t *testing.T) {
	for _, readFirst := range []bool{false, true} {
		t.Run(fmt.Sprint("readFirst=", readFirst), func(t *testing.T) {
			b := newBackend(t, client(t), nil)
			now := time.Now()
			rec, claimed, err := b.Claim(ctx, "s", "r", claimArgs(now))
			if err != nil || !claimed {
				t.Fatalf("claim: %v %v", claimed, err)
			}
			if err := b.AddTallies(ctx, []backend.Tally{{Scope: "s", Key: "r", Conflicts: 3, LastRejection: now}}); err != nil {
				t.Fatal(err)
			}
			if err := b.Release(ctx, "s", "r", rec.Token, backend.Releasing{At: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			if readFirst {
				// Replays turn Claim to reading first.
				for i := range 20 {
					k := fmt.Sprint("d", i)
					d, _, err := b.Claim(ctx, "s", k, claimArgs(now))
					if err != nil {
						t.Fatal(err)
					}
					if err := b.Complete(ctx, "s", k, d.Token, backend.Completion{Result: backend.Result{Status: 200}, At: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
						t.Fatal(err)
					}
				}
				for range 2 {
					for i := range 20 {
						got, claimed, err := b.Claim(ctx, "s", fmt.Sprint("d", i), claimArgs(now))
						if err != nil || claimed || got.State != backend.StateDone || got.Result == nil || got.Result.Status != 200 {
							t.Fatalf("replay: %+v %v %v", got, claimed, err)
						}
					}
				}
			}
			again, claimed, err := b.Claim(ctx, "s", "r", claimArgs(now))
			if err != nil || !claimed {
				t.Fatalf("claim over the released record: %v %v", claimed, err)
			}
			if again.Token <= rec.Token || again.Claims != 2 {
				t.Fatalf("claim over: token %d after %d, claims %d", again.Token, rec.Token, again.Claims)
			}
			got, err := b.Get(ctx, "s", "r")
			if err != nil {
				t.Fatal(err)
			}
			if got.Conflicts != 3 || got.Claims != 2 || got.State != backend.StateInProgress {
				t.Fatalf("after the claim over: conflicts %d, claims %d, state %v", got.Conflicts, got.Claims, got.State)
			}
		})
	}
}
