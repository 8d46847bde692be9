package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
)

// lateBackend shares a Store's Badger backend with a second Store, as
// another instance (the first Store closes it), keeping its LateCompleter.
type lateBackend struct{ *badgerstore.Backend }

func (lateBackend) Close() error { return nil }

// buildLateStore writes a store in which "refund:twice" ran twice (its
// first holder finished after recovery released its claim and another
// claimed and completed the key), "refund:late" was recorded late, and
// "refund:plain" completed as usual. It returns the directory and the
// token of the late holder of refund:twice.
func buildLateStore(t *testing.T) (string, uint64) {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store")
	clock := idemtest.NewClock(scriptT0)
	a, err := idem.Open(dir, &idem.Options{Clock: clock, SweepInterval: -1, Lease: 10 * time.Second,
		Owner: "worker-a", RecoveryGrace: -1})
	if err != nil {
		t.Fatal(err)
	}
	notCommitted := idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})
	b := idem.New(lateBackend{a.Backend().(*badgerstore.Backend)}, &idem.Options{Clock: clock, SweepInterval: -1,
		Lease: 10 * time.Second, Owner: "worker-b", Resolver: notCommitted, RecoveryGrace: -1})
	if _, _, err := a.Do(ctx, idem.Request{Scope: "shop-1", Key: "refund:plain", Fingerprint: "fp-plain"},
		scriptOK(201, `{"refund":"re_plain"}`)); err != nil {
		t.Fatal(err)
	}
	var lateToken uint64
	for _, key := range []string{"refund:twice", "refund:late"} {
		req := idem.Request{Scope: "shop-1", Key: key, Fingerprint: "fp-" + key}
		running, resume, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			_, _, err := a.Do(ctx, req, func(ctx context.Context) (idem.Result, error) {
				if c, ok := idem.ClaimFromContext(ctx); ok && key == "refund:twice" {
					lateToken = c.Token()
				}
				close(running)
				<-resume // paused past the lease
				return idem.Result{Status: 201, Body: []byte(`{"refund":"re_late"}`)}, nil
			})
			done <- err
		}()
		<-running
		clock.Advance(10 * time.Second)
		if rep, err := b.Sweep(ctx); err != nil || rep.NotCommitted != 1 {
			t.Fatalf("sweep: %+v %v", rep, err)
		}
		if key == "refund:twice" {
			if _, _, err := b.Do(ctx, req, scriptOK(201, `{"refund":"re_newer"}`)); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Second)
		close(resume)
		err := <-done
		if (key == "refund:twice") != (err != nil) {
			t.Fatalf("%s: Do returned %v", key, err)
		}
		clock.Advance(time.Second)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, lateToken
}

func TestLs_RanTwiceFirst_InspectTellsTheStory(t *testing.T) {
	dir, lateToken := buildLateStore(t)
	now := scriptT0.Add(time.Minute).Format(time.RFC3339)

	out := mustRun(t, "ls", "-dir", dir, "-now", now)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[1], "RAN TWICE? done") || !strings.Contains(lines[1], "refund:twice") {
		t.Fatalf("the key that may have run twice is not listed first:\n%s", out)
	}
	only := mustRun(t, "ls", "-dir", dir, "-now", now, "-state", "ran_twice")
	if strings.Count(strings.TrimSpace(only), "\n") != 1 || !strings.Contains(only, "refund:twice") {
		t.Fatalf("ls -state ran_twice:\n%s", only)
	}

	story := mustRun(t, "inspect", "-dir", dir, "-now", now, "-scope", "shop-1", "refund:twice")
	contains(t, "inspect refund:twice", story, "may have run twice:", "ran_twice",
		"claim 1 of 2: token "+strconv.FormatUint(lateToken, 10)+" by worker-a",
		"(recovered: not committed) and the key was claimed again", "the effect may have run twice; its result (status 201) was not saved",
		"by worker-b", "completed: status 201 saved")
	if i, j := strings.Index(story, "claim 2 of 2"), strings.LastIndex(story, "ran_twice"); i < 0 || j < i {
		t.Errorf("the late end is not told after the newer claim:\n%s", story)
	}

	late := mustRun(t, "inspect", "-dir", dir, "-now", now, "-scope", "shop-1", "refund:late")
	contains(t, "inspect refund:late", late, "completed_late", "completed late, after recovery had ended its claim (recovered: not committed)")
	if strings.Contains(late, "may have run twice") {
		t.Errorf("a late result recorded alone is not a double run:\n%s", late)
	}
}
