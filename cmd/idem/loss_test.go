package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// TestLoss accepts the loss of a store whose MANIFEST lost its second
// session's table, shows the window, and ends it: a store refused at open
// opens with -accept, the window lasts -window from -now, and a lost key
// then asks before it runs; after -end it runs at once.
func TestLoss(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store")
	manifest := filepath.Join(dir, "MANIFEST")
	var size int64
	for session := range 2 {
		s, err := idem.Open(dir, &idem.Options{Clock: idemtest.NewClock(scriptT0), SweepInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if _, _, err := s.Do(ctx, idem.Request{Key: fmt.Sprintf("k%d-%d", session, i)}, func(context.Context) (idem.Result, error) {
				return idem.Result{Status: 201}, nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if session == 0 {
			info, err := os.Stat(manifest)
			if err != nil {
				t.Fatal(err)
			}
			size = info.Size()
		}
	}
	if err := os.Truncate(manifest, size); err != nil {
		t.Fatal(err)
	}
	now := scriptNow.Format(time.RFC3339)

	if code, _, stderr := runIdem(t, "loss", "-dir", dir, "-now", now); code != 1 || !strings.Contains(stderr, "damaged store") {
		t.Fatalf("idem loss on a damaged store: exit %d, want 1\n%s", code, stderr)
	}
	if code, _, _ := runIdem(t, "loss", "-dir", dir, "-accept", "-end"); code != 2 {
		t.Errorf("-accept -end: exit %d, want 2", code)
	}
	out := mustRun(t, "loss", dir, "-now", now, "-accept", "-window", "48h")
	contains(t, "loss -accept", out, "loss window: 2026-03-02T11:00:00Z to 2026-03-04T11:00:00Z, in force",
		"lost:", "damaged store")

	var res lossResult
	if err := json.Unmarshal([]byte(mustRun(t, "loss", "-dir", dir, "-now", now, "-json")), &res); err != nil {
		t.Fatal(err)
	}
	if !res.InForce || res.Window == nil || !res.Window.End.Equal(scriptNow.Add(48*time.Hour)) {
		t.Errorf("loss -json: %+v, want the window in force until -now plus 48h", res)
	}
	out = mustRun(t, "loss", "-dir", dir, "-now", scriptNow.Add(48*time.Hour).Format(time.RFC3339))
	contains(t, "loss after the window", out, ", ended")

	// A lost key, with no Resolver, is held rather than run.
	s, err := idem.Open(dir, &idem.Options{Clock: idemtest.NewClock(scriptNow), SweepInterval: -1, CloseTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Do(ctx, idem.Request{Key: "k1-0"}, func(context.Context) (idem.Result, error) {
		t.Error("a lost key ran in the window")
		return idem.Result{}, nil
	})
	if !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Errorf("a lost key with no Resolver: %v, want ErrOutcomeUnknown", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	contains(t, "loss -end", mustRun(t, "loss", "-dir", dir, "-now", now, "-end"), "loss window ended", "no loss window")
	contains(t, "loss", mustRun(t, "loss", dir, "-now", now), "no loss window")
}
