package idem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
)

// downstreamKeys runs one attempt of req's effect and returns the
// downstream keys it derived for names, with the claim's token.
func downstreamKeys(t *testing.T, s *idem.Store, req idem.Request, names []string, fail func()) (keys []string, token uint64) {
	t.Helper()
	defer func() {
		if recover() == nil && fail != nil {
			t.Fatal("the attempt did not panic")
		}
	}()
	_, _, err := s.Do(context.Background(), req, func(ctx context.Context) (idem.Result, error) {
		c, _ := idem.ClaimFromContext(ctx)
		token = c.Token()
		for _, n := range names {
			k, err := idem.DownstreamKey(ctx, n)
			if err != nil {
				t.Fatalf("DownstreamKey(%q): %v", n, err)
			}
			if err := backend.ValidateKey(k); err != nil {
				t.Fatalf("DownstreamKey(%q) = %q: %v", n, k, err)
			}
			keys = append(keys, k)
		}
		if fail != nil {
			fail()
		}
		return idem.Result{Status: 200}, nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	return keys, token
}

// TestDownstreamKey_StableAcrossRecovery: an attempt dies (a panic holds
// its claim), recovery answers "not committed", and the effect runs again
// with a new token: every downstream key is the one the first attempt
// derived.
func TestDownstreamKey_StableAcrossRecovery(t *testing.T) {
	asked := 0
	// No grace: the held claim goes to the Resolver at the next attempt.
	s := openStore(t, "", &idem.Options{RecoveryGrace: -1, Resolver: idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
		asked++
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})})
	req := idem.Request{Scope: "tool:refund", Key: "refund:o-1", Fingerprint: "f"}
	names := []string{"payments", "email"}
	first, t1 := downstreamKeys(t, s, req, names, func() { panic("killed after the payment call") })
	again, t2 := downstreamKeys(t, s, req, names, nil)
	if asked != 1 || t1 == t2 {
		t.Fatalf("resolver asked %d times, tokens %d and %d: the second attempt did not follow recovery", asked, t1, t2)
	}
	for i := range names {
		if first[i] != again[i] {
			t.Fatalf("%s: key %q in the first attempt, %q after recovery", names[i], first[i], again[i])
		}
	}
}

// TestDownstreamKey_Distinct: keys differ between names and between claims
// (another key, another scope), and nothing is lost to how the parts join.
func TestDownstreamKey_Distinct(t *testing.T) {
	s := openStore(t, "", nil)
	seen := map[string]string{}
	for _, req := range []idem.Request{
		{Scope: "a", Key: "b:c"},
		{Scope: "a:b", Key: "c"},
		{Scope: "a", Key: "b"},
		{Scope: "x", Key: "b"},
	} {
		keys, _ := downstreamKeys(t, s, req, []string{"payments", "email", "", "c"}, nil)
		for i, k := range keys {
			what := req.Scope + "|" + req.Key + "|" + []string{"payments", "email", "", "c"}[i]
			if prev, dup := seen[k]; dup {
				t.Fatalf("%s and %s share the downstream key %q", prev, what, k)
			}
			seen[k] = what
		}
	}
}

// TestDownstreamKey_OutsideAnEffect returns ErrNoClaim.
func TestDownstreamKey_OutsideAnEffect(t *testing.T) {
	k, err := idem.DownstreamKey(context.Background(), "payments")
	if k != "" || !errors.Is(err, idem.ErrNoClaim) {
		t.Fatalf("DownstreamKey outside an effect = %q, %v; want ErrNoClaim", k, err)
	}
}
