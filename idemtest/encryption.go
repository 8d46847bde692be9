package idemtest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/keyring"
	"github.com/stretchr/testify/require"
)

// The cases below check what encryption (idem.Options.Keys) adds; they
// run under TestBackendEncrypted and return at once under TestBackend.

// marker is the secret the cases' results carry; it must never reach the
// backend in clear.
const marker = "SECRET-7f3a-MARKER"

func secretResult() backend.Result {
	return backend.Result{Status: 201, Body: []byte(`{"account":"` + marker + `"}`),
		Header: map[string][]string{"X-Token": {marker}}}
}

// unowned is a backend a second Store shares without closing it.
type unowned struct{ backend.Backend }

func (unowned) Close() error { return nil }

// otherStore returns a Store over e's backend with the keys given (nil for
// none), closed when the test ends.
func (e *env) otherStore(keys *keyring.Ring) *idem.Store {
	s := idem.New(unowned{e.b}, &idem.Options{Clock: e.clk, SweepInterval: -1, Lease: lease,
		Retention: retention, CloseTimeout: time.Millisecond, Keys: keys})
	e.t.Cleanup(func() { _ = s.Close() })
	return s
}

// requireSealed requires, when the case runs with keys, that the backend
// holds r's result sealed under the active key.
func (e *env) requireSealed(nb source, r idem.Request) {
	e.t.Helper()
	if nb.keys == nil {
		return
	}
	raw, err := e.b.Get(ctx, r.Scope, r.Key)
	require.NoError(e.t, err)
	id, sealed := keyring.Sealed(raw.Result)
	require.True(e.t, sealed, "the backend holds the result of %s in clear", r.Key)
	require.Equal(e.t, nb.keys.Active(), id)
}

// testEncryptedAtRest: results, saved errors and a journal's arguments
// reach the backend sealed, and read back whole.
func testEncryptedAtRest(t *testing.T, nb source) {
	if nb.keys == nil {
		return
	}
	e := newEnv(t, nb, func(o *idem.Options) {
		o.Policy = func(idem.Result, error) idem.Decision { return idem.DecisionSave }
		o.ErrorText = func(err error) string { return err.Error() }
	})
	want := secretResult()
	e.claim(req("ok", "fp")).Complete(ctx, want)
	_, _, err := e.store.Do(ctx, req("err", "fp"), func(context.Context) (backend.Result, error) {
		return backend.Result{Status: 402}, errors.New("card " + marker + " declined")
	})
	require.ErrorContains(t, err, marker)
	step, err := idem.NewJournal(e.store, nil).Plan(ctx, "run-1", 1, "refund", []byte(`{"iban":"`+marker+`"}`))
	require.NoError(t, err)

	for _, r := range []idem.Request{req("ok", "fp"), req("err", "fp"), {Scope: idem.JournalScope, Key: step.Key}} {
		e.requireSealed(nb, r)
		raw, err := e.b.Get(ctx, r.Scope, r.Key)
		require.NoError(t, err)
		require.False(t, bytes.Contains(backend.EncodeRecord(raw), []byte(marker)), r.Key)
	}
	// A fresh Store (no replay cache) opens them.
	s := e.otherStore(nb.keys)
	_, res, err := s.Begin(ctx, req("ok", "fp"))
	require.NoError(t, err)
	require.Equal(t, want, *res)
	rec, err := s.Get(ctx, "tenant-a", "ok")
	require.NoError(t, err)
	require.Equal(t, want, *rec.Result)
	_, _, err = s.Do(ctx, req("err", "fp"), func(context.Context) (backend.Result, error) { panic("ran again") })
	var saved *idem.SavedError
	require.ErrorAs(t, err, &saved)
	require.Contains(t, saved.Message, marker)
	again, err := idem.NewJournal(s, nil).Plan(ctx, "run-1", 1, "refund", []byte(`{"other":1}`))
	require.NoError(t, err)
	require.Contains(t, string(again.Args), marker)
}

// testEncryptedKeys: a record sealed under a key the ring lacks is refused
// with ErrMissingKey and stays as it is (never replayed, never run again);
// a ring holding the old key reads it; a plain record written before
// encryption was turned on still reads; a flipped byte is ErrCorrupt.
func testEncryptedKeys(t *testing.T, nb source) {
	if nb.keys == nil {
		return
	}
	e := newEnv(t, nb)
	want := secretResult()
	e.claim(req("k", "fp")).Complete(ctx, want)

	other, err := keyring.New(keyring.Key{ID: "elsewhere", Secret: bytes.Repeat([]byte{9}, keyring.KeySize)})
	require.NoError(t, err)
	for _, keys := range []*keyring.Ring{other, nil} {
		s := e.otherStore(keys)
		ran := false
		_, _, err := s.Do(ctx, req("k", "fp"), func(context.Context) (backend.Result, error) { ran = true; return want, nil })
		var mk *idem.MissingKeyError
		require.ErrorAs(t, err, &mk)
		require.ErrorIs(t, err, idem.ErrMissingKey)
		require.Equal(t, nb.keys.Active(), mk.KeyID)
		require.False(t, ran, "the effect ran again")
		_, err = s.Get(ctx, "tenant-a", "k")
		require.ErrorIs(t, err, idem.ErrMissingKey)
	}
	raw, err := e.b.Get(ctx, "tenant-a", "k")
	require.NoError(t, err)
	require.Equal(t, backend.StateDone, raw.State)

	// Rotation: a ring with a newer active key still reads the record.
	newer, err := keyring.New(keyring.Key{ID: "newer", Secret: bytes.Repeat([]byte{8}, keyring.KeySize)},
		keyring.Key{ID: "suite-new", Secret: bytes.Repeat([]byte{2}, keyring.KeySize)},
		keyring.Key{ID: "suite-old", Secret: bytes.Repeat([]byte{1}, keyring.KeySize)})
	require.NoError(t, err)
	_, res, err := e.otherStore(newer).Begin(ctx, req("k", "fp"))
	require.NoError(t, err)
	require.Equal(t, want, *res)

	// Written in clear by a Store without keys, read by one with them.
	plain := e.otherStore(nil)
	c, _, err := plain.Begin(ctx, req("plain", "fp"))
	require.NoError(t, err)
	require.NoError(t, c.Complete(ctx, okResult("clear")))
	_, res, err = e.otherStore(nb.keys).Begin(ctx, req("plain", "fp"))
	require.NoError(t, err)
	require.Equal(t, "clear", string(res.Body))

	// A flipped byte in a stored ciphertext: ErrCorrupt for that key.
	sealed, err := nb.keys.Seal(want, "tenant-a", "bad", "fp")
	require.NoError(t, err)
	sealed.Body[len(sealed.Body)-20] ^= 1
	now := e.clk.Now()
	rec, claimed, err := e.b.Claim(ctx, "tenant-a", "bad", backend.ClaimArgs{Fingerprint: "fp", Now: now,
		LeaseEnds: now.Add(lease), Retention: retention})
	require.NoError(t, err)
	require.True(t, claimed)
	require.NoError(t, e.b.Complete(ctx, "tenant-a", "bad", rec.Token, backend.Completion{Result: sealed,
		At: now, ExpiresAt: now.Add(retention), Ending: backend.Ending{At: now, Outcome: "completed", Status: 201}}))
	_, _, err = e.store.Begin(ctx, req("bad", "fp"))
	require.ErrorIs(t, err, idem.ErrCorrupt)
	// The right key id with another secret: corrupt, never a wrong replay.
	wrong, err := keyring.New(keyring.Key{ID: nb.keys.Active(), Secret: bytes.Repeat([]byte{7}, keyring.KeySize)})
	require.NoError(t, err)
	_, _, err = e.otherStore(wrong).Begin(ctx, req("k", "fp"))
	require.ErrorIs(t, err, idem.ErrCorrupt)
	// Copied under another key: does not open either.
	good, err := e.b.Get(ctx, "tenant-a", "k")
	require.NoError(t, err)
	rec, claimed, err = e.b.Claim(ctx, "tenant-a", "copy", backend.ClaimArgs{Fingerprint: "fp", Now: now,
		LeaseEnds: now.Add(lease), Retention: retention})
	require.NoError(t, err)
	require.True(t, claimed)
	require.NoError(t, e.b.Complete(ctx, "tenant-a", "copy", rec.Token, backend.Completion{Result: *good.Result,
		At: now, ExpiresAt: now.Add(retention), Ending: backend.Ending{At: now, Outcome: "completed", Status: 201}}))
	_, _, err = e.store.Begin(ctx, req("copy", "fp"))
	require.ErrorIs(t, err, idem.ErrCorrupt)
}

// StoreSecrets saves through s records whose every part a caller owns
// carries secret: a result's body and headers, a saved error's text, a
// result an operator settles and a Journal's arguments (in scope tenant-a
// and JournalScope). A test of encryption at rest then looks for secret
// in everything the backend wrote (files, backups, exports, rows): with
// Options.Keys set, it must be found nowhere. It returns the number of
// records written.
func StoreSecrets(t testing.TB, s *idem.Store, secret string) int {
	t.Helper()
	do := func(key string, res backend.Result) {
		t.Helper()
		c, _, err := s.Begin(ctx, idem.Request{Scope: "tenant-a", Key: key, Fingerprint: "fp"})
		require.NoError(t, err)
		require.NotNil(t, c, key)
		require.NoError(t, c.Complete(ctx, res))
	}
	do("secret-result", backend.Result{Status: 200, Body: []byte(`{"card":"` + secret + `"}`),
		Header: map[string][]string{"X-Secret": {secret}}})
	do("secret-error", backend.Result{Status: 402, Error: "card " + secret + " declined"})
	// A claim held for recovery, then settled by an operator.
	held := idem.Request{Scope: "tenant-a", Key: "secret-settled", Fingerprint: "fp"}
	c, _, err := s.Begin(ctx, held)
	require.NoError(t, err)
	require.NoError(t, c.Hold(ctx))
	require.NoError(t, s.Settle(ctx, held.Scope, held.Key, idem.VerdictCommitted,
		backend.Result{Status: 200, Body: []byte(secret)}, "checked by hand", nil))
	_, err = idem.NewJournal(s, nil).Plan(ctx, "run-"+secret[:4], 1, "refund", []byte(`{"iban":"`+secret+`"}`))
	require.NoError(t, err)
	return 4
}

// rekeyable is a backend a second Store shares without closing it, with
// what Store.Rekey needs of it.
type rekeyable struct {
	backend.Backend
	backend.Lister
	backend.Resealer
}

func (rekeyable) Close() error { return nil }

// testEncryptedRekey: Store.Rekey seals every result again under a new
// active key (those in clear too), a second run has nothing to do, and the
// old keys can then leave the ring (backends that list and reseal).
func testEncryptedRekey(t *testing.T, nb source) {
	if nb.keys == nil {
		return
	}
	e := newEnv(t, nb)
	lister, ok := e.b.(backend.Lister)
	resealer, ok2 := e.b.(backend.Resealer)
	if !ok || !ok2 {
		t.Skip("the backend is no backend.Lister and backend.Resealer")
	}
	n := StoreSecrets(t, e.store, marker)
	plain := e.otherStore(nil)
	c, _, err := plain.Begin(ctx, req("plain", "fp"))
	require.NoError(t, err)
	require.NoError(t, c.Complete(ctx, okResult("clear")))
	n++

	newer := keyring.Key{ID: "newer", Secret: bytes.Repeat([]byte{8}, keyring.KeySize)}
	rotated, err := keyring.New(newer, keyring.Key{ID: "suite-new", Secret: bytes.Repeat([]byte{2}, keyring.KeySize)})
	require.NoError(t, err)
	s := idem.New(rekeyable{e.b, lister, resealer}, &idem.Options{Clock: e.clk, SweepInterval: -1, Lease: lease,
		Retention: retention, CloseTimeout: time.Millisecond, Keys: rotated})
	t.Cleanup(func() { _ = s.Close() })
	r, err := s.Rekey(ctx)
	require.NoError(t, err)
	require.Equal(t, idem.RekeyReport{Scanned: n, Rekeyed: n}, *r)
	r, err = s.Rekey(ctx)
	require.NoError(t, err)
	require.Equal(t, idem.RekeyReport{Scanned: n, Current: n}, *r)

	only, err := keyring.New(newer)
	require.NoError(t, err)
	fresh := e.otherStore(only)
	_, res, err := fresh.Begin(ctx, req("secret-result", "fp"))
	require.NoError(t, err)
	require.Contains(t, string(res.Body), marker)
	_, res, err = fresh.Begin(ctx, req("plain", "fp"))
	require.NoError(t, err)
	require.Equal(t, "clear", string(res.Body))
	raw, err := e.b.Get(ctx, "tenant-a", "plain")
	require.NoError(t, err)
	id, sealed := keyring.Sealed(raw.Result)
	require.True(t, sealed && id == "newer", "the result saved in clear is sealed by Rekey")
}

// testEncryptedSettle: the first sealed result writes the store's marker;
// a Store without keys then refuses to settle a result in clear
// (ErrKeysNeeded) and writes nothing, settles one when told InClear (and
// the story says so), and settles a not-committed verdict, which saves no
// result; a Store with the keys seals the settled result.
func testEncryptedSettle(t *testing.T, nb source) {
	if nb.keys == nil {
		return
	}
	e := newEnv(t, nb, func(o *idem.Options) { o.MaxUnknown = 1 })
	_, err := e.b.Get(ctx, idem.EncryptionScope, idem.EncryptionMarker)
	require.ErrorIs(t, err, backend.ErrNotFound, "no marker before anything is sealed")
	e.claim(req("done", "fp")).Complete(ctx, secretResult())
	mark, err := e.b.Get(ctx, idem.EncryptionScope, idem.EncryptionMarker)
	require.NoError(t, err, "the first sealed result writes the marker")
	require.Equal(t, backend.StateDone, mark.State)
	require.Equal(t, nb.keys.Active(), string(mark.Result.Body))

	for _, k := range []string{"clear", "keyed", "unpaid"} {
		e.claim(req(k, "fp"))
	}
	e.clk.Advance(2 * lease)
	plain := e.otherStore(nil)
	err = plain.Settle(ctx, "tenant-a", "clear", idem.VerdictCommitted, secretResult(), "alice: ledger", nil)
	var kn *idem.KeysNeededError
	require.ErrorAs(t, err, &kn)
	require.ErrorIs(t, err, idem.ErrKeysNeeded)
	require.Contains(t, err.Error(), "-keys")
	require.Contains(t, kn.Because, idem.EncryptionScope)
	raw, err := e.b.Get(ctx, "tenant-a", "clear")
	require.NoError(t, err)
	require.Equal(t, backend.StateInProgress, raw.State, "a refused settle writes nothing")

	require.NoError(t, plain.Settle(ctx, "tenant-a", "unpaid", idem.VerdictNotCommitted, backend.Result{}, "bob: none", nil),
		"a not-committed verdict saves no result: no key needed")

	require.NoError(t, plain.Settle(ctx, "tenant-a", "clear", idem.VerdictCommitted, secretResult(), "alice: ledger",
		&idem.SettleOptions{InClear: true}))
	raw, err = e.b.Get(ctx, "tenant-a", "clear")
	require.NoError(t, err)
	_, sealed := keyring.Sealed(raw.Result)
	require.False(t, sealed, "told InClear, the result is stored in clear")
	require.Equal(t, "settled: committed, in clear", raw.Recovered)
	require.Equal(t, "settled: committed, in clear", raw.Attempts[len(raw.Attempts)-1].Outcome)

	require.NoError(t, e.store.Settle(ctx, "tenant-a", "keyed", idem.VerdictCommitted, secretResult(), "alice: ledger", nil))
	e.requireSealed(nb, req("keyed", "fp"))
	raw, err = e.b.Get(ctx, "tenant-a", "keyed")
	require.NoError(t, err)
	require.Equal(t, "settled: committed", raw.Recovered)
}

// testEncryptedSealedFound: a store whose results were sealed before the
// marker existed is known as encrypted by a sealed result, on a backend
// that lists records.
func testEncryptedSealedFound(t *testing.T, nb source) {
	if nb.keys == nil {
		return
	}
	e := newEnv(t, nb)
	lister, ok := e.b.(backend.Lister)
	resealer, ok2 := e.b.(backend.Resealer)
	if !ok || !ok2 {
		t.Skip("the backend does not list records: only the marker says a store is encrypted")
	}
	// A sealed result written straight to the backend, without a marker.
	sealed, err := nb.keys.Seal(secretResult(), "tenant-a", "old", "fp")
	require.NoError(t, err)
	now := e.clk.Now()
	rec, claimed, err := e.b.Claim(ctx, "tenant-a", "old", backend.ClaimArgs{Fingerprint: "fp", Now: now,
		LeaseEnds: now.Add(lease), Retention: retention})
	require.NoError(t, err)
	require.True(t, claimed)
	require.NoError(t, e.b.Complete(ctx, "tenant-a", "old", rec.Token, backend.Completion{Result: sealed,
		At: now, ExpiresAt: now.Add(retention), Ending: backend.Ending{At: now, Outcome: "completed", Status: 201}}))
	plain := idem.New(rekeyable{e.b, lister, resealer}, &idem.Options{Clock: e.clk, SweepInterval: -1, Lease: lease,
		CloseTimeout: time.Millisecond})
	t.Cleanup(func() { _ = plain.Close() })
	_, _, err = plain.Begin(ctx, req("stuck", "fp"))
	require.NoError(t, err)
	e.clk.Advance(2 * lease)
	err = plain.Settle(ctx, "tenant-a", "stuck", idem.VerdictCommitted, okResult("x"), "alice: ledger", nil)
	var kn *idem.KeysNeededError
	require.ErrorAs(t, err, &kn)
	require.Contains(t, kn.Because, `sealed under key "`+nb.keys.Active()+`"`)
}

// testEncryptedInspect: a Store without the key reads a sealed record's
// whole story with Inspect, its result marked sealed under the key and
// holding no ciphertext; Get still refuses it.
func testEncryptedInspect(t *testing.T, nb source) {
	if nb.keys == nil {
		return
	}
	e := newEnv(t, nb)
	e.claim(req("done", "fp")).Complete(ctx, secretResult())
	e.replay(req("done", "fp"))
	for _, keys := range []*keyring.Ring{nil, otherRing(t)} {
		s := e.otherStore(keys)
		_, err := s.Get(ctx, "tenant-a", "done")
		require.ErrorIs(t, err, idem.ErrMissingKey)
		rec, sealedUnder, err := s.Inspect(ctx, "tenant-a", "done")
		require.NoError(t, err)
		require.Equal(t, nb.keys.Active(), sealedUnder)
		require.Equal(t, backend.StateDone, rec.State)
		require.Equal(t, 1, rec.Claims)
		require.NotEmpty(t, rec.Attempts)
		require.Equal(t, backend.Result{Status: 201}, *rec.Result, "status only: never the ciphertext as the body")
	}
	rec, sealedUnder, err := e.store.Inspect(ctx, "tenant-a", "done")
	require.NoError(t, err)
	require.Empty(t, sealedUnder, "with the key, the result is opened")
	require.Equal(t, secretResult(), *rec.Result)
}

// otherRing is a ring whose only key seals nothing the suite stores.
func otherRing(t *testing.T) *keyring.Ring {
	t.Helper()
	r, err := keyring.New(keyring.Key{ID: "elsewhere", Secret: bytes.Repeat([]byte{9}, keyring.KeySize)})
	require.NoError(t, err)
	return r
}
