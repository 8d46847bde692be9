package idemadmin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemadmin"
	"github.com/idemkit/idem/idemtest"
)

// TestHandler_CountsApproximate checks that the operator's views say when
// a count is a lower bound: a store whose process ended without Close
// (its backend closed under it, as a crash leaves the store) may have
// lost counts of the records it served, which inspect, ls and the page
// then mark; a record first seen after the reopen is shown exact.
func TestHandler_CountsApproximate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := idemtest.NewClock(t0)
	dead, err := idem.Open(dir, &idem.Options{Clock: clk, SweepInterval: -1, CountInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	req := idem.Request{Scope: "shop-1", Key: "before", Fingerprint: "fp-before"}
	for range 3 {
		if _, _, err := dead.Do(ctx, req, func(context.Context) (idem.Result, error) {
			return idem.Result{Status: 201}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := dead.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	// The process "dies": its Store never closes; the directory is freed.
	if err := dead.Backend().Close(); err != nil {
		t.Fatal(err)
	}

	clk.Advance(time.Minute)
	e := newAdminEnvOn(t, dir, nil, nil)
	e.clock.Set(clk.Now().Add(time.Minute))
	e.do(t, "after", 200)
	if _, _, err := e.store.Begin(ctx, idem.Request{Scope: "shop-1", Key: "after", Fingerprint: "fp-after"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Sweep(ctx); err != nil {
		t.Fatal(err)
	}

	var before, after idemadmin.Story
	e.call(t, "GET", "/inspect?scope=shop-1&key=before", &before)
	e.call(t, "GET", "/inspect?scope=shop-1&key=after", &after)
	if before.Replays != 2 || !before.CountsApproximate {
		t.Errorf("before: %d replays, approximate %v; want 2, marked approximate", before.Replays, before.CountsApproximate)
	}
	if after.Replays != 1 || after.CountsApproximate {
		t.Errorf("after: %d replays, approximate %v; want 1, exact", after.Replays, after.CountsApproximate)
	}
	var ls idemadmin.Listing
	e.call(t, "GET", "/ls", &ls)
	for _, r := range ls.Rows {
		if r.CountsApproximate != (r.Key == "before") {
			t.Errorf("ls: %s marked approximate %v", r.Key, r.CountsApproximate)
		}
	}
	_, text := e.call(t, "GET", "/inspect?scope=shop-1&key=before&format=text", nil)
	if !strings.Contains(text, "replays      ≥ 2") || !strings.Contains(text, "replayed at least 2 times") {
		t.Errorf("the text story does not mark the count:\n%s", text)
	}
	page := e.browser(t, "operator").get("/ui/key?scope=shop-1&key=before")
	hasAll(t, "key page", page, `<dd id="replays">≥ 2</dd>`, `id="counts-approximate"`)
	page = e.browser(t, "operator").get("/ui/key?scope=shop-1&key=after")
	hasNone(t, "key page", page, `id="counts-approximate"`)
}
