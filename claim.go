package idem

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/backend"
)

// Request names one intended effect: the key within its scope, and the
// fingerprint of what the request asks for.
type Request struct {
	// Scope separates tenants, principals or tools: the same key in two
	// scopes is two records. At most MaxScopeLen bytes; may be empty.
	Scope string
	// Key is the idempotency key: 1 to MaxKeyLen printable ASCII characters.
	Key string
	// Fingerprint is the digest of the payload (see Fingerprint). A repeat
	// with another fingerprint is refused with a *MismatchError.
	Fingerprint string
	// PreviousFingerprint is the payload's digest under the previous
	// algorithm when it differs (Fingerprinter.SumPrevious), so that a
	// record stored before an upgrade still matches. May be empty.
	PreviousFingerprint string
	// Retention overrides Options.Retention for this record when positive.
	Retention time.Duration
	// Lease overrides Options.Lease for this claim when positive.
	Lease time.Duration
}

// Claim is a won claim on a key: its holder runs the effect, then
// completes, releases or holds the claim. Every call is fenced by the
// claim's token, so a holder whose claim was recovered and taken over
// changes nothing. A Claim is safe for concurrent use.
type Claim struct {
	s           *Store
	scope       string
	key         string
	fingerprint string
	token       uint64
	lease       time.Duration
	retention   time.Duration

	// commit, when set, writes the completion in the effect's own
	// transaction (DoTx).
	commit backend.Committer

	// mu guards leaseEnds and finished.
	mu        sync.Mutex
	leaseEnds time.Time
	finished  bool
}

// Scope returns the claim's scope.
func (c *Claim) Scope() string { return c.scope }

// Key returns the claim's key.
func (c *Claim) Key() string { return c.key }

// Token returns the claim's fencing token. Pass it downstream where a
// system can refuse writes from an older token.
func (c *Claim) Token() uint64 { return c.token }

// LeaseEnds returns when the claim's lease ends unless extended.
func (c *Claim) LeaseEnds() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leaseEnds
}

// Begin claims req's key, or tells why it cannot run. On a nil error
// exactly one of the results is set: a *Claim when the caller must run the
// effect and then call Complete, Release or Hold; or the saved *Result of
// an earlier run to replay. The errors are *InProgressError, *MismatchError,
// *OutcomeUnknownError, and ones wrapping ErrInvalidKey, ErrUnavailable,
// ErrCorrupt and ErrClosed.
//
// A claim whose lease ended is first resolved through the Resolver; Begin
// then answers as the resolution dictates.
//
// A replayed *Result may be shared with every other replay of the key: read
// it, never modify it or what its Header and Body hold (copy them first).
// Handing out the saved result as it is keeps a replay free of copies.
func (s *Store) Begin(ctx context.Context, req Request) (*Claim, *Result, error) {
	if strings.HasPrefix(req.Scope, backend.ReservedScopePrefix) {
		// Before the cache, which holds the Journal's records too.
		return nil, nil, backend.ValidateScope(req.Scope)
	}
	return s.begin(ctx, req, false)
}

// begin is Begin; own admits idem's reserved scopes, for the Journal.
func (s *Store) begin(ctx context.Context, req Request, own bool) (*Claim, *Result, error) {
	if res := s.replayCached(ctx, req); res != nil {
		return nil, res, nil
	}
	if err := validate(req.Scope, req.Key, own); err != nil {
		return nil, nil, err
	}
	if err := s.accept(); err != nil {
		return nil, nil, err
	}
	lease := req.Lease
	if lease <= 0 {
		lease = s.o.Lease
	}
	retention := req.Retention
	if retention <= 0 {
		retention = s.o.Retention
	}
	// Each round either answers or resolves a stale claim, which changes
	// the record; a few rounds cover a resolution racing another request.
	for round := 0; ; round++ {
		now := s.now()
		var rec *Record
		var claimed bool
		err := s.call(func() (err error) {
			rec, claimed, err = s.b.Claim(ctx, req.Scope, req.Key, backend.ClaimArgs{
				Fingerprint: req.Fingerprint, Now: now, LeaseEnds: now.Add(lease),
				Retention: retention, Owner: s.owner, Brief: true,
			})
			return err
		})
		if err != nil {
			s.observeErr("claim", req.Scope, req.Key, 0, err)
			return nil, nil, err
		}
		if claimed && lostMaybe(rec) {
			// An accepted loss may have forgotten the key (loss.go).
			if res, err := s.askLost(ctx, rec); res != nil || err != nil {
				return nil, res, err
			}
		}
		if claimed {
			c := &Claim{s: s, scope: req.Scope, key: req.Key, fingerprint: req.Fingerprint, token: rec.Token,
				lease: lease, retention: retention, leaseEnds: rec.LeaseEnds}
			if !s.claimStarted() {
				// Close began while we claimed: give the key back. The claim
				// was never counted, so it bypasses end.
				_ = s.call(func() error {
					return s.b.Release(context.WithoutCancel(ctx), req.Scope, req.Key, rec.Token,
						releasing(now, expiresAt(now, retention), "store closing"))
				})
				return nil, nil, ErrClosed
			}
			s.observe(Event{Kind: EventClaimed, Scope: req.Scope, Key: req.Key, Token: rec.Token, Time: now})
			return c, nil, nil
		}
		if !sameRequest(rec.Fingerprint, req) {
			if !s.counting(func() { s.count(req.Scope, req.Key, rec, EventMismatch, now) }) {
				return nil, nil, ErrClosed
			}
			s.observe(Event{Kind: EventMismatch, Scope: req.Scope, Key: req.Key, Token: rec.Token, Time: now})
			return nil, nil, &MismatchError{Scope: req.Scope, Key: req.Key, Stored: rec.Fingerprint, Got: req.Fingerprint}
		}
		switch {
		case rec.State == StateDone:
			if err := s.open(req.Scope, req.Key, rec); err != nil {
				// Held for the operator: never replayed as something else,
				// never run again.
				s.observeErr("replay", req.Scope, req.Key, rec.Token, err)
				return nil, nil, err
			}
			res := rec.Result
			if res == nil {
				res = &Result{}
			}
			// The backend's record is this Store's copy, done and not
			// expired at now: the next replay can come from the cache,
			// whose new entry counts this one.
			if !s.counting(func() { s.countReplay(req.Scope, req.Key, rec, now) }) {
				return nil, nil, ErrClosed
			}
			s.observe(Event{Kind: EventReplayed, Scope: req.Scope, Key: req.Key, Token: rec.Token, Time: now})
			return nil, res, nil
		case !rec.Stale(now):
			if !s.counting(func() { s.count(req.Scope, req.Key, rec, EventInProgress, now) }) {
				return nil, nil, ErrClosed
			}
			s.observe(Event{Kind: EventInProgress, Scope: req.Scope, Key: req.Key, Token: rec.Token, Time: now})
			return nil, nil, &InProgressError{Scope: req.Scope, Key: req.Key, LeaseEnds: rec.LeaseEnds}
		}
		if _, err := s.resolveStale(ctx, rec, now); err != nil {
			return nil, nil, err
		}
		if round >= 8 {
			return nil, nil, &InProgressError{Scope: req.Scope, Key: req.Key, LeaseEnds: now}
		}
	}
}

// replayCached answers req from the replay cache (replaycache.go), or returns nil
// when Begin must take its full path: the key is not cached, its
// fingerprint differs (a mismatch to count and report), its record has
// expired, or the store or ctx is done. A replay here takes one lock, of
// the key's shard of the cache (which also guards the replay's count),
// allocates nothing, makes no backend call (so it needs no call: it never
// touches storage) and, with the system clock, reads no clock unless the
// record is within coarseSlack of its expiry (replayClock).
//
// It skips the key's validation: the cache is filled only under keys
// Begin has validated, so a hit proves the request's key valid, and a miss
// goes to the full path, which validates.
func (s *Store) replayCached(ctx context.Context, req Request) *Result {
	if s.refusing.Load() || ctx.Err() != nil {
		return nil
	}
	now, behind := s.replayClock()
	e, now := s.hot.replay(req.Scope, req.Key, req.Fingerprint, now, behind, s.now, s.tallier != nil)
	if e == nil {
		return nil
	}
	if s.o.Observer != nil {
		s.observe(Event{Kind: EventReplayed, Scope: req.Scope, Key: req.Key, Token: e.token, Time: now})
	}
	return &e.result
}

// replayClock returns the time a replay from the cache is judged at and
// how much older than the current time it may be: with the system clock,
// the latest reading, taken in the background (see coarseSlack); otherwise,
// or when an Observer is to get the replay's exact time, a fresh reading.
func (s *Store) replayClock() (time.Time, time.Duration) {
	if s.wall != nil && s.o.Observer == nil {
		if t := s.wall.latest(); t != nil {
			return *t, coarseSlack
		}
	}
	return s.now(), 0
}

// Complete saves res as the key's result: every repeat replays it until the
// record expires. It fails with ErrFenced if the claim is no longer current,
// and with a *NotRecordedError (ErrOutcomeNotRecorded) if storage failed or
// the store closed: the claim then stays for recovery. Release and Hold
// fail the same ways. (Do, when its Complete is fenced, records the outcome
// late: see LateCompleter.)
func (c *Claim) Complete(ctx context.Context, res Result) error {
	return c.end(ctx, DecisionSave, res, "", nil)
}

// Release ends the claim without saving anything: the next request with
// the key runs the effect again. reason is kept in the record's story.
func (c *Claim) Release(ctx context.Context, reason string) error {
	return c.end(ctx, DecisionRelease, Result{}, reason, nil)
}

// Hold ends this holder's part but leaves the claim in progress with its
// lease ended, so that recovery asks the Resolver whether the effect
// happened, once Options.RecoveryGrace has passed (a write of the effect
// may still be on its way). Use it when the outcome is ambiguous.
func (c *Claim) Hold(ctx context.Context) error {
	return c.end(ctx, DecisionHold, Result{}, heldByHolder, nil)
}

// Extend renews the lease for another lease period from now. Do calls it
// from its heartbeat; callers of Begin call it for long effects.
func (c *Claim) Extend(ctx context.Context) error {
	c.mu.Lock()
	finished := c.finished
	c.mu.Unlock()
	if finished {
		return ErrClaimDone
	}
	now := c.s.now()
	ends := now.Add(c.lease)
	err := c.s.call(func() error { return c.s.b.Extend(ctx, c.scope, c.key, c.token, ends) })
	if err != nil {
		c.s.fencedOrErr("extend", c.scope, c.key, c.token, err)
		return err
	}
	c.mu.Lock()
	c.leaseEnds = ends
	c.mu.Unlock()
	c.s.observe(Event{Kind: EventExtended, Scope: c.scope, Key: c.key, Token: c.token, Time: now})
	return nil
}

// end ends the claim as d says; cause is the effect's error, if Do has
// one, for the Observer.
func (c *Claim) end(ctx context.Context, d Decision, res Result, reason string, cause error) error {
	c.mu.Lock()
	if c.finished {
		c.mu.Unlock()
		return ErrClaimDone
	}
	c.finished = true
	c.mu.Unlock()
	s := c.s
	now := s.now()
	var kind EventKind
	var done hotRecord // the record completed, for the replay cache
	err := s.call(func() error {
		switch d {
		case DecisionSave:
			kind = EventCompleted
			sealed, err := s.seal(ctx, c.scope, c.key, c.fingerprint, res)
			if err != nil {
				return err
			}
			comp := completion(sealed, now, expiresAt(now, c.retention), "")
			write := s.b.Complete
			if c.commit != nil {
				write = func(ctx context.Context, _, _ string, _ uint64, comp backend.Completion) error {
					return c.commit.Commit(ctx, c.scope, c.key, c.token, comp)
				}
			}
			if err := write(ctx, c.scope, c.key, c.token, comp); err != nil {
				return err
			}
			if len(res.Body) <= hotMaxBody {
				// A copy: the caller may reuse what res holds.
				done = hotRecord{Fingerprint: c.fingerprint, Token: c.token, ExpiresAt: comp.ExpiresAt, Result: res.Clone()}
			}
			return nil
		case DecisionHold:
			kind = EventHeld
			// Why it is held goes into the claim's attempt, where any
			// process reads it, or this Store's memory (held.go). A
			// transactional claim keeps its attempt's note, the backend's
			// mark that recovery releases it without the Resolver
			// (backend.Transactor).
			if c.commit != nil {
				return s.b.Extend(ctx, c.scope, c.key, c.token, now)
			}
			if h, ok := s.b.(backend.Holder); ok {
				return h.Hold(ctx, c.scope, c.key, c.token, now, reason)
			}
			s.held.note(c, reason)
			return s.b.Extend(ctx, c.scope, c.key, c.token, now)
		default:
			kind = EventReleased
			return s.b.Release(ctx, c.scope, c.key, c.token, releasing(now, expiresAt(now, c.retention), reason))
		}
	})
	s.claimFinished()
	if err != nil {
		s.fencedOrErr(kind.String(), c.scope, c.key, c.token, err)
		if errors.Is(err, ErrFenced) {
			return err
		}
		// The effect ran: a failed end must not read as "did not run".
		return &NotRecordedError{Scope: c.scope, Key: c.key, Cause: err}
	}
	if done.Result != nil {
		s.keep(c.scope, c.key, done)
	}
	s.observe(Event{Kind: kind, Scope: c.scope, Key: c.key, Token: c.token, Time: now, Reason: reason, Err: cause})
	return nil
}

func (s *Store) fencedOrErr(op, scope, key string, token uint64, err error) {
	if errors.Is(err, ErrFenced) {
		s.observe(Event{Kind: EventFenced, Scope: scope, Key: key, Token: token, Reason: op, Err: err})
		return
	}
	s.observeErr(op, scope, key, token, err)
}

// Do runs fn once for req's key and returns its result; every repeat gets
// the saved result back with replayed set. While fn runs, Do extends the
// claim's lease every Lease/3. fn's context carries the lease's end as its
// deadline (ctx.Deadline reports the current end, or the caller's deadline
// if that is earlier), moved by each successful extension. It is
// cancelled when the claim is lost to recovery (context.Cause is then the
// *FencedError), and as soon as the lease ends before an extension
// succeeded, as when the storage cannot be reached (ctx.Err and
// context.Cause are then context.DeadlineExceeded): from then on recovery
// may hand the claim to another holder, so fn should stop. The deadline
// is in the Store's Clock: with an injected clock far from the wall clock
// (a test's), a dial or I/O that takes ctx's deadline as a wall time
// fails at once. When fn returns, the error policy saves the outcome,
// releases the claim or holds it. A panic in fn is an unknown outcome (fn
// may have acted before it): with a Resolver the claim is held for it, in
// progress with its lease ended, and the Resolver decides on the next
// access or sweep whether the effect committed; without one it is
// released, and a retry runs fn again. Either way the panic is re-raised.
// (DoTx always releases: the effect's transaction rolls back.)
//
// A replayed result whose first run returned an error saved by the policy
// comes back with a *SavedError. A replayed result's Header and Body may be
// shared with every other replay of the key: read them, never modify them.
//
// If fn ran but its outcome could not be recorded (storage failed, or
// Close ran out of CloseTimeout while fn ran), Do returns fn's result and a
// *NotRecordedError, which matches ErrOutcomeNotRecorded and never
// ErrUnavailable or ErrClosed: the effect may have happened, and the claim
// is left for recovery, so a retry with the key never runs it twice. If it
// could not be saved because the claim had been recovered meanwhile (the
// holder was paused past its lease), Do records it late (see
// LateCompleter): if the record is released or absent, the result is
// recorded and Do returns as if Complete had succeeded (the effect ran
// once and is recorded; the next request replays it); if another holder
// claimed the key since, the record is marked MayHaveRunTwice and the
// error is a *RanTwiceError (ErrRanTwice, ErrOutcomeNotRecorded). If the
// backend cannot record it late, or that write fails, the error is a
// *LateCompletionError, which matches ErrOutcomeNotRecorded and ErrFenced:
// the effect ran unrecorded.
func (s *Store) Do(ctx context.Context, req Request, fn func(ctx context.Context) (Result, error)) (res Result, replayed bool, err error) {
	return s.do(ctx, req, fn, nil)
}

func (s *Store) do(ctx context.Context, req Request, fn func(ctx context.Context) (Result, error), commit backend.Committer) (res Result, replayed bool, err error) {
	c, saved, err := s.Begin(ctx, req)
	if err != nil {
		return Result{}, false, err
	}
	if saved != nil {
		if saved.Error != "" {
			return *saved, true, &SavedError{Message: saved.Error}
		}
		return *saved, true, nil
	}
	c.commit = commit
	// The claim's time, for its attempt in a late completion's story:
	// Begin set the first lease's end a lease after it.
	claimedAt := c.LeaseEnds().Add(-c.lease)
	rollback := func() {
		if commit != nil {
			commit.Rollback(context.WithoutCancel(ctx))
		}
	}
	inner, cancel := context.WithCancelCause(context.WithValue(ctx, claimKey{}, c))
	fnCtx := leaseContext{Context: inner, c: c}
	hbDone := make(chan struct{})
	go c.heartbeat(inner, cancel, hbDone)
	finish := func() {
		cancel(nil)
		<-hbDone
	}
	normal := false
	defer func() {
		if normal {
			return
		}
		// fn panicked or called runtime.Goexit. A panic is an unknown
		// outcome: the effect may have acted before it. With a Resolver,
		// and no transaction that rolls the effect back, the claim is held
		// for it; otherwise it is released. Either way the panic is
		// re-raised.
		p := recover()
		finish()
		rollback()
		endCtx := context.WithoutCancel(ctx)
		if p != nil && commit == nil && s.o.Resolver != nil {
			_ = c.end(endCtx, DecisionHold, Result{}, panicNote, nil)
		} else {
			_ = c.Release(endCtx, "panic")
		}
		if p != nil {
			panic(p)
		}
	}()
	res, err = fn(fnCtx)
	normal = true
	finish()

	endCtx := context.WithoutCancel(ctx)
	var endErr error
	// The record and its story keep s.errorText(err), never err's own
	// text, which may carry secrets (Options.ErrorText); the Observer
	// gets err itself.
	late := false
	var kept Result // the result saved
	switch s.o.Policy(res, err) {
	case DecisionSave:
		kept = res
		if err != nil {
			kept.Error = s.errorText(err)
		}
		endErr = c.end(endCtx, DecisionSave, kept, "", err)
		// Fenced after fn ran: unless the write was the effect's own
		// transaction (rolled back), the effect happened unrecorded.
		late = commit == nil && errors.Is(endErr, ErrFenced)
	case DecisionHold:
		rollback()
		endErr = c.end(endCtx, DecisionHold, Result{}, s.policyHold(res, err), err)
	default:
		rollback()
		reason := "error policy"
		if err != nil {
			reason = "error"
			if t := s.errorText(err); t != "error" {
				reason += ": " + t
			}
		} else if res.Status != 0 {
			reason = fmt.Sprintf("status %d", res.Status)
		}
		endErr = c.end(endCtx, DecisionRelease, Result{}, reason, err)
	}
	if late {
		return res, false, s.completeLate(endCtx, c, claimedAt, kept, err, endErr)
	}
	if errors.Is(endErr, ErrFenced) {
		// The claim was recovered while fn ran, and the new holder's
		// outcome stands: a refused save through a Committer rolled the
		// effect's writes back with it, and a release or hold had
		// nothing to record.
		return res, false, errors.Join(endErr, err)
	}
	if endErr != nil {
		nr := &NotRecordedError{Scope: req.Scope, Key: req.Key, Cause: endErr, Err: err}
		var inner *NotRecordedError
		if errors.As(endErr, &inner) {
			nr.Cause = inner.Cause
		}
		return res, false, nr
	}
	return res, false, err
}

type claimKey struct{}

// ClaimFromContext returns the claim whose effect Do is running with ctx,
// so that the effect can pass the fencing token downstream. ctx's
// deadline is the claim's lease end (see Do), also Claim.LeaseEnds.
func ClaimFromContext(ctx context.Context) (*Claim, bool) {
	c, ok := ctx.Value(claimKey{}).(*Claim)
	return c, ok
}

// leaseContext is fn's context in Do: its deadline is the claim's lease
// end, which moves with every extension (context.WithDeadline's cannot).
// The heartbeat cancels it when the lease ends unextended, with
// context.DeadlineExceeded as the cause, which Err then reports.
type leaseContext struct {
	context.Context // a cancel-cause context carrying the claim
	c               *Claim
}

// Deadline returns the lease's current end, or the parent's deadline if
// that is earlier.
func (l leaseContext) Deadline() (time.Time, bool) {
	end := l.c.LeaseEnds()
	if d, ok := l.Context.Deadline(); ok && d.Before(end) {
		return d, true
	}
	return end, true
}

// Err reports context.DeadlineExceeded when the lease ended unextended.
func (l leaseContext) Err() error {
	err := l.Context.Err()
	if err != nil && errors.Is(context.Cause(l.Context), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}

// heartbeat extends the claim every lease/3 until ctx ends. It cancels
// the effect's context when the claim was fenced (recovered and taken
// over; the cause is the error), and as soon as the lease ends before an
// extension succeeded (the cause is context.DeadlineExceeded): from then on
// recovery may hand the claim to someone else. An extension that fails for
// a storage hiccup is tried again at the next beat while the lease lasts;
// each may take at most what remains of the lease. The heartbeat waits on
// one clock channel at a time: the next beat, or the lease's end if that
// comes first.
func (c *Claim) heartbeat(ctx context.Context, cancel context.CancelCauseFunc, done chan<- struct{}) {
	defer close(done)
	clock := c.s.o.Clock
	every := c.lease / 3
	for {
		select {
		case <-ctx.Done():
			return
		case <-clock.After(min(every, c.LeaseEnds().Sub(c.s.now()))):
		}
		if ctx.Err() != nil {
			return
		}
		left := c.LeaseEnds().Sub(c.s.now())
		if left <= 0 {
			cancel(context.DeadlineExceeded)
			return
		}
		ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), left)
		err := c.Extend(ectx)
		ecancel()
		switch {
		case errors.Is(err, ErrFenced) || errors.Is(err, ErrClaimDone):
			cancel(err)
			return
		case err != nil && !c.s.now().Before(c.LeaseEnds()):
			cancel(context.DeadlineExceeded)
			return
		}
	}
}
