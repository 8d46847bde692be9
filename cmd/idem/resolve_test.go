package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// TestResolve settles two claims left open by a process that stopped: one
// as committed with the result the ledger shows, one as not committed;
// the stories say who and why, and the bad uses exit 2 or 1.
func TestResolve(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store")
	s, err := idem.Open(dir, &idem.Options{Clock: idemtest.NewClock(scriptT0), SweepInterval: -1,
		CloseTimeout: time.Millisecond, Owner: "refund-tool-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"refund:order-7", "refund:order-8"} {
		if _, _, err := s.Begin(ctx, idem.Request{Scope: "shop-1", Key: key, Fingerprint: "fp-" + key}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	body := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(body, []byte(`{"refund":"re_7"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	now := scriptNow.Format(time.RFC3339)

	for _, bad := range [][]string{
		{"refund:order-7", "-committed", "-status", "201", "-note", "x", "-not-committed"},
		{"refund:order-7", "-committed", "-note", "no status"},
		{"refund:order-7", "-not-committed"},
		{"refund:order-7", "-not-committed", "-status", "201", "-note", "x"},
		{"-not-committed", "-note", "no key"},
	} {
		args := append([]string{"resolve", "-dir", dir, "-scope", "shop-1", "-now", now}, bad...)
		if code, _, stderr := runIdem(t, args...); code != 2 || !strings.Contains(stderr, "usage: idem resolve") {
			t.Errorf("idem %s: exit %d, want 2\n%s", strings.Join(args, " "), code, stderr)
		}
	}

	out := normalizeOwners(t, dir, mustRun(t, "resolve", "-dir", dir, "-scope", "shop-1", "-now", now, "refund:order-7",
		"-committed", "-status", "201", "-body-file", body, "-content-type", "application/json",
		"-by", "alice", "-note", "the ledger has re_7"))
	golden(t, "resolve_committed", out)
	contains(t, "resolve -committed", out, "settled by an operator: committed (alice: the ledger has re_7)")

	out = normalizeOwners(t, dir, mustRun(t, "resolve", dir, "-scope", "shop-1", "-now", now, "-json",
		"refund:order-8", "-not-committed", "-by", "bob", "-note", "the provider has no charge"))
	golden(t, "resolve_not_committed_json", out)
	contains(t, "resolve -not-committed -json", out, "not_committed: bob: the provider has no charge")

	code, _, stderr := runIdem(t, "resolve", "-dir", dir, "-scope", "shop-1", "-now", now, "refund:order-7",
		"-not-committed", "-by", "bob", "-note", "again")
	if code != 1 || !strings.Contains(stderr, "no stale claim to settle") {
		t.Errorf("settling a done key: exit %d\n%s", code, stderr)
	}

	s, err = idem.Open(dir, &idem.Options{Clock: idemtest.NewClock(scriptNow), SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, replayed, err := s.Do(ctx, idem.Request{Scope: "shop-1", Key: "refund:order-7", Fingerprint: "fp-refund:order-7"},
		func(context.Context) (idem.Result, error) { t.Fatal("ran again"); return idem.Result{}, nil })
	if err != nil || !replayed || res.Status != 201 || string(res.Body) != `{"refund":"re_7"}` ||
		res.Header["Content-Type"][0] != "application/json" {
		t.Fatalf("after resolve: %v %v %+v", err, replayed, res)
	}
}
