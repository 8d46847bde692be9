package idem_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
	"github.com/stretchr/testify/require"
)

// lateBackend is a shared Badger backend (see sharedBackend) that keeps
// its LateCompleter.
type lateBackend struct{ *badgerstore.Backend }

func (lateBackend) Close() error { return nil }

// lateStores returns two Stores, "a" and "b", on one Badger store in
// t.TempDir() and one fake clock; b has a Resolver that answers "not
// committed", and both log to the returned buffer (Options.Logger).
func lateStores(t *testing.T, clock *idemtest.Clock, lateCompleter bool) (a, b *idem.Store, log *syncBuffer) {
	t.Helper()
	bk, err := badgerstore.Open(t.TempDir(), badgerstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = bk.Close() })
	var shared backend.Backend = lateBackend{bk}
	if !lateCompleter {
		shared = sharedBackend{bk}
	}
	log = &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	notCommitted := idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})
	open := func(owner string, r idem.Resolver) *idem.Store {
		s := idem.New(shared, &idem.Options{Clock: clock, Lease: testLease, SweepInterval: -1,
			Owner: owner, Resolver: r, RecoveryGrace: -1, Logger: logger})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	return open("a", nil), open("b", notCommitted), log
}

// syncBuffer is a bytes.Buffer safe for the observer's goroutines.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// pausedDo starts a.Do on req with an effect that waits, ignoring its
// context, until resume is closed, as a holder paused past its lease; the
// sweep of b then releases the claim ("not committed"). It returns what
// Do returns, once resume is closed.
func pausedDo(t *testing.T, clock *idemtest.Clock, a, b *idem.Store, req idem.Request, resume chan struct{}) func() (idem.Result, error) {
	t.Helper()
	running := make(chan struct{})
	type answer struct {
		res idem.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, _, err := a.Do(context.Background(), req, func(context.Context) (idem.Result, error) {
			close(running)
			<-resume
			return idem.Result{Status: 201, Body: []byte("late")}, nil
		})
		done <- answer{res, err}
	}()
	<-running
	clock.Advance(testLease)
	rep, err := b.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, rep.NotCommitted)
	return func() (idem.Result, error) { x := <-done; return x.res, x.err }
}

func TestDo_LateCompletion_RecordedWhenReleased(t *testing.T) {
	ctx := context.Background()
	clock := idemtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	a, b, log := lateStores(t, clock, true)
	req := idem.Request{Key: "k", Fingerprint: "fp"}
	resume := make(chan struct{})
	wait := pausedDo(t, clock, a, b, req, resume)
	close(resume)
	res, err := wait()
	require.NoError(t, err, "the late result is recorded: Do answers as if Complete had succeeded")
	require.Equal(t, "late", string(res.Body))

	runs := 0
	got, replayed, err := b.Do(ctx, req, func(context.Context) (idem.Result, error) { runs++; return idem.Result{}, nil })
	require.NoError(t, err)
	require.True(t, replayed, "the next request replays the late result")
	require.Zero(t, runs)
	require.Equal(t, 201, got.Status)
	rec, err := b.Get(ctx, "", "k")
	require.NoError(t, err)
	require.False(t, rec.MayHaveRunTwice)
	require.Len(t, rec.Attempts, 1)
	require.Equal(t, "completed late", rec.Attempts[0].Outcome)
	require.Contains(t, log.String(), "level=INFO msg=\"idem completed_late\"")
}

func TestDo_LateCompletion_RecordedWhenAbsent(t *testing.T) {
	ctx := context.Background()
	clock := idemtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	a, b, _ := lateStores(t, clock, true)
	req := idem.Request{Key: "k", Fingerprint: "fp", Retention: time.Minute}
	resume := make(chan struct{})
	wait := pausedDo(t, clock, a, b, req, resume)
	clock.Advance(time.Minute) // the released record expires and is reclaimed
	rep, err := b.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Expired)
	_, err = b.Get(ctx, "", "k")
	require.ErrorIs(t, err, idem.ErrNotFound)
	close(resume)
	_, err = wait()
	require.NoError(t, err)
	rec, err := b.Get(ctx, "", "k")
	require.NoError(t, err)
	require.Equal(t, idem.StateDone, rec.State)
	require.Equal(t, "late", string(rec.Result.Body))
	require.True(t, rec.ExpiresAt.Equal(clock.Now().Add(time.Minute)), "the request's retention")
	require.Equal(t, "a", rec.Attempts[0].Owner)
}

func TestDo_LateCompletion_MarkedWhenClaimedAgain(t *testing.T) {
	ctx := context.Background()
	clock := idemtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	a, b, log := lateStores(t, clock, true)
	req := idem.Request{Key: "k", Fingerprint: "fp"}
	resume := make(chan struct{})
	wait := pausedDo(t, clock, a, b, req, resume)
	newer, _, err := b.Begin(ctx, req)
	require.NoError(t, err)
	require.NotNil(t, newer)
	close(resume)
	res, err := wait()
	require.Equal(t, "late", string(res.Body))
	require.ErrorIs(t, err, idem.ErrRanTwice)
	require.ErrorIs(t, err, idem.ErrOutcomeNotRecorded)
	require.ErrorIs(t, err, idem.ErrFenced)
	require.NotErrorIs(t, err, idem.ErrUnavailable)
	var twice *idem.RanTwiceError
	require.True(t, errors.As(err, &twice))
	require.Equal(t, idem.DefaultErrorText(err), idem.ErrRanTwice.Error())

	require.NoError(t, newer.Complete(ctx, idem.Result{Status: 200, Body: []byte("newer")}))
	got, replayed, err := a.Do(ctx, req, func(context.Context) (idem.Result, error) { return idem.Result{}, nil })
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, "newer", string(got.Body), "the newer holder's outcome stands")
	rec, err := a.Get(ctx, "", "k")
	require.NoError(t, err)
	require.True(t, rec.MayHaveRunTwice, "the newer holder's completion keeps the mark")
	require.Equal(t, twice.Token, rec.Attempts[0].Token)
	require.Equal(t, "completed late: may have run twice", rec.Attempts[0].Outcome)
	require.Contains(t, log.String(), "level=WARN msg=\"idem ran_twice\"")
}

// Without a LateCompleter, Do keeps the behaviour of before: the outcome
// is reported unrecorded, and nothing is written.
func TestDo_LateCompletion_WithoutLateCompleter(t *testing.T) {
	ctx := context.Background()
	clock := idemtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	a, b, _ := lateStores(t, clock, false)
	req := idem.Request{Key: "k", Fingerprint: "fp"}
	resume := make(chan struct{})
	wait := pausedDo(t, clock, a, b, req, resume)
	close(resume)
	_, err := wait()
	var late *idem.LateCompletionError
	require.True(t, errors.As(err, &late), "%v", err)
	require.ErrorIs(t, err, idem.ErrOutcomeNotRecorded)
	require.NotErrorIs(t, err, idem.ErrRanTwice)
	rec, err := b.Get(ctx, "", "k")
	require.NoError(t, err)
	require.Equal(t, idem.StateReleased, rec.State)
}
