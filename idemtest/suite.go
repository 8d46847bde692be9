// Package idemtest holds the conformance suite every backend.Backend runs, and
// the fake clock it uses.
//
// A backend's own tests call TestBackend with a function that returns a
// fresh, empty backend:
//
//	func TestConformance(t *testing.T) {
//		idemtest.TestBackend(t, func(t testing.TB) backend.Backend {
//			b, err := badgerstore.Open(t.TempDir(), badgerstore.Options{})
//			if err != nil {
//				t.Fatal(err)
//			}
//			return b
//		})
//	}
//
// The suite covers every row of the contract table in the design, fencing,
// leases and heartbeats, the error policy (a panic included, with and
// without a Resolver), retention with an injected clock
// (it never sleeps), recovery with each resolver answer, scope isolation,
// invalid input, and races of 64 goroutines on one key.
package idemtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/keyring"
	"github.com/stretchr/testify/require"
)

// NewBackend returns a fresh, empty backend for one test. The suite closes
// it (through the Store it wraps it in) when the test ends.
type NewBackend func(t testing.TB) backend.Backend

// Epoch is where the suite's fake clocks start.
var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Settings the suite's stores use; tests move the fake clock across them.
const (
	lease     = 10 * time.Second
	retention = time.Hour
)

// TestBackend runs the conformance suite against the backends newBackend
// returns.
func TestBackend(t *testing.T, newBackend NewBackend) {
	run(t, source{open: newBackend})
}

// run runs every case of the suite with the backends and keys of src.
func run(t *testing.T, src source) {
	tests := []struct {
		name string
		fn   func(*testing.T, source)
	}{
		{"Backend_Claim", testBackendClaim},
		{"Backend_ClaimBrief", testBackendClaimBrief},
		{"Backend_Fenced", testBackendFenced},
		{"Backend_Stale", testBackendStale},
		{"Backend_Reclaim", testBackendReclaim},
		{"Backend_Copies", testBackendCopies},
		{"Backend_StoresEnding", testBackendEnding},
		{"Backend_LateRecorded", testBackendLateRecorded},
		{"Backend_LateRanTwice", testBackendLateRanTwice},
		{"Backend_Reseal", testBackendReseal},
		{"Cache_ReplaysWithoutBackend", testReplayCache},
		{"Cache_RecoveredResult", testReplayCacheRecovery},
		{"Contract_ClaimAbsent", testContractClaimAbsent},
		{"Contract_InProgress", testContractInProgress},
		{"Contract_Replay", testContractReplay},
		{"Contract_Mismatch", testContractMismatch},
		{"Contract_InvalidKey", testContractInvalidKey},
		{"Contract_Unavailable", testContractUnavailable},
		{"Contract_Closed", testContractClosed},
		{"Contract_NotRecordedEveryPath", testContractNotRecorded},
		{"Contract_ClosedUnderEffect", testContractClosedUnderEffect},
		{"Contract_ReservedScope", testContractReservedScope},
		{"Counts_ExactOrMarked", testCountsExactOrMarked},
		{"Recovery_OperatorSettles", testSettle},
		{"Policy_ErrorTextKept", testErrorText},
		{"Contract_ExpiredRunsAgain", testContractExpired},
		{"Fencing_StaleTokenChangesNothing", testFencing},
		{"Fencing_TokensNeverRepeat", testTokensNeverRepeat},
		{"Lease_EndsWithoutHeartbeat", testLeaseEnds},
		{"Lease_HeartbeatKeepsClaimLive", testHeartbeat},
		{"Lease_ExtendByHand", testExtend},
		{"Policy_ErrorReleases", testPolicyErrorReleases},
		{"Policy_5xxReleases", testPolicy5xxReleases},
		{"Policy_SaveReplaysError", testPolicySave},
		{"Policy_HoldGoesToRecovery", testPolicyHold},
		{"Policy_PanicReleasesAndReraises", testPolicyPanic},
		{"Policy_PanicHeldForResolver", testPolicyPanicHeld},
		{"Policy_PanicNoteKeptByTheBackend", testPolicyPanicNoteKept},
		{"Policy_HoldNoteKeptByTheBackend", testPolicyHoldNoteKept},
		{"Retention_Override", testRetentionOverride},
		{"Retention_SweepReclaims", testRetentionSweep},
		{"Recovery_Committed", testRecoveryCommitted},
		{"Recovery_NotCommitted", testRecoveryNotCommitted},
		{"Recovery_UnknownBacksOffThenAttention", testRecoveryUnknown},
		{"Recovery_ResolverErrorIsUnknown", testRecoveryResolverError},
		{"Recovery_NoResolverKeepsClaim", testRecoveryNoResolver},
		{"Recovery_SweepEachVerdict", testRecoverySweep},
		{"Recovery_MismatchBeforeRecovery", testRecoveryMismatch},
		{"Late_RecordedWhenReleasedOrAbsent", testDoLateRecorded},
		{"Late_RanTwiceWhenClaimedAgain", testDoLateRanTwice},
		{"Scope_Isolation", testScopeIsolation},
		{"Race_64GoroutinesOneKey", testRace},
		{"Race_DoWhileClose", testCloseDrains},
		{"Observer_EveryTransition", testObserver},
		{"Story_ClaimsAndCounts", testStory},
		{"Story_Bounded", testStoryBounded},
		{"Encryption_AtRest", testEncryptedAtRest},
		{"Encryption_KeysAndTampering", testEncryptedKeys},
		{"Encryption_Rekey", testEncryptedRekey},
		{"Encryption_MarkerAndSettle", testEncryptedSettle},
		{"Encryption_SealedResultFound", testEncryptedSealedFound},
		{"Encryption_StoryWithoutKey", testEncryptedInspect},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, src) })
	}
}

// TestBackendEncrypted runs the conformance suite against the backends
// newBackend returns with results encrypted (idem.Options.Keys): every
// case runs with a keyring of two keys, the second active, so that what
// the backend stores is sealed and every replay opens it.
func TestBackendEncrypted(t *testing.T, newBackend NewBackend) {
	t.Helper()
	old := keyring.Key{ID: "suite-old", Secret: bytes.Repeat([]byte{1}, keyring.KeySize)}
	active := keyring.Key{ID: "suite-new", Secret: bytes.Repeat([]byte{2}, keyring.KeySize)}
	ring, err := keyring.New(active, old)
	if err != nil {
		t.Fatal(err)
	}
	run(t, source{open: newBackend, keys: ring})
}

// source is where a case gets its backend, and the keyring its Store
// encrypts with (nil for none).
type source struct {
	open NewBackend
	keys *keyring.Ring
}

// wrap returns a source of the backends open returns, with the same keys.
func (s source) wrap(open NewBackend) source { return source{open: open, keys: s.keys} }

// env is one test's store, clock and recorded events.
type env struct {
	t      testing.TB
	clk    *Clock
	store  *idem.Store
	b      backend.Backend
	events *events
}

type option func(*idem.Options)

func newEnv(t testing.TB, nb source, opts ...option) *env {
	t.Helper()
	e := &env{t: t, clk: NewClock(epoch), events: &events{}}
	e.b = nb.open(t)
	o := &idem.Options{
		// Counts reach the records at Sweep, as the tests say, not at a
		// wall-clock interval that a slow run may cross.
		Clock: e.clk, SweepInterval: -1, Lease: lease, Retention: retention, CountInterval: time.Hour,
		// Tests leave claims open; Close need not wait for them.
		Observer: e.events, CloseTimeout: time.Millisecond,
	}
	o.Keys = nb.keys
	for _, fn := range opts {
		fn(o)
	}
	e.store = idem.New(e.b, o)
	t.Cleanup(func() {
		if err := e.store.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return e
}

func withResolver(r idem.Resolver) option { return func(o *idem.Options) { o.Resolver = r } }

func req(key, fp string) idem.Request {
	return idem.Request{Scope: "tenant-a", Key: key, Fingerprint: fp}
}

var ctx = context.Background()

// claim begins req and requires a won claim.
func (e *env) claim(r idem.Request) *idem.Claim {
	e.t.Helper()
	c, res, err := e.store.Begin(ctx, r)
	require.NoError(e.t, err)
	require.Nil(e.t, res, "expected a claim, got a replay")
	require.NotNil(e.t, c)
	return c
}

// replay begins req and requires a replayed result.
func (e *env) replay(r idem.Request) *backend.Result {
	e.t.Helper()
	c, res, err := e.store.Begin(ctx, r)
	require.NoError(e.t, err)
	require.Nil(e.t, c, "expected a replay, got a claim")
	require.NotNil(e.t, res)
	return res
}

func (e *env) get(r idem.Request) *backend.Record {
	e.t.Helper()
	rec, err := e.store.Get(ctx, r.Scope, r.Key)
	require.NoError(e.t, err)
	return rec
}

// events records what the store observed.
type events struct {
	mu   sync.Mutex // guards list and subs
	list []idem.Event
	subs []chan idem.Event
}

func (l *events) Observe(e idem.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, e)
	for _, s := range l.subs {
		select {
		case s <- e:
		default:
		}
	}
}

func (l *events) subscribe() <-chan idem.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan idem.Event, 1024)
	l.subs = append(l.subs, ch)
	return ch
}

func (l *events) count(kind idem.EventKind, key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.list {
		if e.Kind == kind && (key == "" || e.Key == key) {
			n++
		}
	}
	return n
}

// countReason counts the events of kind whose Reason starts with prefix.
func (l *events) countReason(kind idem.EventKind, prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.list {
		if e.Kind == kind && strings.HasPrefix(e.Reason, prefix) {
			n++
		}
	}
	return n
}

// waitFor receives from ch until an event of kind arrives. The timeout only
// turns a hang into a failure; it asserts nothing about speed.
func waitFor(t testing.TB, ch <-chan idem.Event, kind idem.EventKind) idem.Event {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case e := <-ch:
			if e.Kind == kind {
				return e
			}
		case <-timeout:
			t.Fatalf("no %s event arrived", kind)
			return idem.Event{}
		}
	}
}

// resolverFunc counts calls and answers with fn.
type countingResolver struct {
	mu    sync.Mutex // guards calls and seen
	calls int
	seen  []*backend.Record
	fn    func(*backend.Record) (idem.Resolution, error)
}

func (r *countingResolver) Resolve(_ context.Context, rec *backend.Record) (idem.Resolution, error) {
	r.mu.Lock()
	r.calls++
	r.seen = append(r.seen, rec)
	r.mu.Unlock()
	return r.fn(rec)
}

func (r *countingResolver) n() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

func answer(v idem.Verdict, res backend.Result) *countingResolver {
	return &countingResolver{fn: func(*backend.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: v, Result: res}, nil
	}}
}

func okResult(body string) backend.Result {
	return backend.Result{Status: 200, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(body)}
}

func keyN(prefix string, i int) string { return fmt.Sprintf("%s-%04d", prefix, i) }

// failing wraps a backend and fails every call while fail is set.
type failing struct {
	backend.Backend
	mu   sync.Mutex // guards fail
	fail bool
}

var errInjected = fmt.Errorf("%w: injected failure", backend.ErrUnavailable)

func (f *failing) broken() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fail
}

func (f *failing) set(v bool) {
	f.mu.Lock()
	f.fail = v
	f.mu.Unlock()
}

func (f *failing) Claim(ctx context.Context, scope, key string, a backend.ClaimArgs) (*backend.Record, bool, error) {
	if f.broken() {
		return nil, false, errInjected
	}
	return f.Backend.Claim(ctx, scope, key, a)
}

func (f *failing) Complete(ctx context.Context, scope, key string, token uint64, c backend.Completion) error {
	if f.broken() {
		return errInjected
	}
	return f.Backend.Complete(ctx, scope, key, token, c)
}

func (f *failing) Get(ctx context.Context, scope, key string) (*backend.Record, error) {
	if f.broken() {
		return nil, errInjected
	}
	return f.Backend.Get(ctx, scope, key)
}

func (f *failing) Release(ctx context.Context, scope, key string, token uint64, r backend.Releasing) error {
	if f.broken() {
		return errInjected
	}
	return f.Backend.Release(ctx, scope, key, token, r)
}

func (f *failing) Extend(ctx context.Context, scope, key string, token uint64, leaseEnds time.Time) error {
	if f.broken() {
		return errInjected
	}
	return f.Backend.Extend(ctx, scope, key, token, leaseEnds)
}

func isUnavailable(err error) bool { return errors.Is(err, backend.ErrUnavailable) }
