package backend

import (
	"context"
	"time"
)

// ClaimArgs are the values a backend stores with a new claim. The store
// fills them from its clock and options; backends never read a clock.
type ClaimArgs struct {
	Fingerprint string
	// Now is the store's time: a done or released record whose ExpiresAt is
	// not after Now counts as absent.
	Now time.Time
	// LeaseEnds is when the new claim goes stale unless extended.
	LeaseEnds time.Time
	// Retention is kept with the claim and applied when it completes.
	Retention time.Duration
	// Owner names the claiming process instance.
	Owner string
	// Brief says the caller reads only State, Fingerprint, Token,
	// ExpiresAt and Result of a done record it did not claim (Store.Begin
	// answering a replay or a mismatch). A backend may then return such a
	// record with only those fields and Format, Scope and Key set, leaving
	// the rest (its story, counts, times) zero, to read less from its
	// storage. Every other record it returns, claimed or not, is whole,
	// but for the counts a Tallier keeps beside the record, which Get and
	// Scan add up and Claim need not. Backends that always return whole
	// records ignore it.
	Brief bool
}

// Completion describes how a claim ends as done.
type Completion struct {
	Result Result
	// At is when it completed; ExpiresAt when the record stops replaying.
	At, ExpiresAt time.Time
	// Recovered is empty for a completion by the claim's holder, and says
	// how recovery decided otherwise (for example "committed").
	Recovered string
	// Ending is how the claim's attempt ends in the record's story: see
	// Attempt's ending fields.
	Ending Ending
}

// Releasing describes how a claim ends as released.
type Releasing struct {
	// At is when it was released; ExpiresAt is when the history kept of the
	// record may be reclaimed.
	At, ExpiresAt time.Time
	// Reason says why, for the record's story (Record.Recovered).
	Reason string
	// Ending is how the claim's attempt ends in the record's story.
	Ending Ending
}

// Ending is how a claim's attempt ends, as the Store words it once for
// every backend. A backend stores it, as given, in the attempt of the
// fenced token in Record.Attempts (if that attempt is still kept): At as
// EndedAt, and Outcome, Status and, when not empty, Reason; an empty
// Reason keeps the note the attempt has. Backends add no wording of their
// own.
type Ending struct {
	At      time.Time
	Outcome string
	Reason  string
	Status  int
}

// Deferral is recovery's bookkeeping for a claim whose outcome is unknown.
type Deferral struct {
	Checks    int
	NextCheck time.Time
	Attention bool
}

// Ref names one record and the token it had.
type Ref struct {
	Scope, Key string
	Token      uint64
}

// Backend is the storage under a Store: a few atomic primitives on records
// keyed by (scope, key). The policy (fingerprints, the error policy,
// recovery, events) lives once in Store, above every backend.
//
// Every method is safe for concurrent use, takes ctx first, and reports a
// storage failure as an error wrapping ErrUnavailable. Records passed in and
// out are copies. Fenced methods (Complete, Release, Extend, Defer) change
// the record only if it is in progress with exactly the given token, and
// otherwise return an error wrapping ErrFenced and change nothing.
//
// The idemtest package holds the conformance suite a Backend must pass.
type Backend interface {
	// Claim stores a new in-progress record for (scope, key) with a fresh
	// token, if none is stored or the stored one is released or expired at
	// args.Now, and returns it with claimed true. Otherwise it returns the
	// stored record and false. Of any number of concurrent calls for one
	// key, across every process sharing the storage, at most one claims.
	Claim(ctx context.Context, scope, key string, args ClaimArgs) (rec *Record, claimed bool, err error)

	// Complete turns the claim into a done record holding c.Result.
	Complete(ctx context.Context, scope, key string, token uint64, c Completion) error

	// Release ends the claim so that the next request claims the key again.
	Release(ctx context.Context, scope, key string, token uint64, r Releasing) error

	// Extend moves the claim's lease end to leaseEnds (earlier or later).
	Extend(ctx context.Context, scope, key string, token uint64, leaseEnds time.Time) error

	// Defer records an inconclusive recovery check on the claim.
	Defer(ctx context.Context, scope, key string, token uint64, d Deferral) error

	// Get returns the stored record, or ErrNotFound. It does not judge
	// expiry: the store does, with its own clock.
	Get(ctx context.Context, scope, key string) (*Record, error)

	// Stale returns up to limit in-progress records whose lease ended at
	// now, whose NextCheck is not after now and that do not need attention,
	// oldest lease first. Its cost is proportional to the number of open
	// claims, not to the number of records.
	Stale(ctx context.Context, now time.Time, limit int) ([]*Record, error)

	// Reclaim deletes up to limit done or released records whose ExpiresAt
	// is not after now, and returns what it deleted. Fewer than limit means
	// nothing more is due.
	Reclaim(ctx context.Context, now time.Time, limit int) ([]Ref, error)

	// Close releases the backend's resources. The Store calls it once, after
	// every other call has returned.
	Close() error
}

// Lister is implemented by backends that can list records for inspection
// (the command line's ls and export). Iteration order is the backend's.
type Lister interface {
	// Scan calls fn for every stored record until fn returns false or an
	// error occurs.
	Scan(ctx context.Context, fn func(*Record) bool) error
}

// Maintainer is implemented by backends with housekeeping of their own to
// run now and then, such as the Badger backend's value-log garbage
// collection. The Store's background sweep calls Maintain after every
// Sweep, off the request path; an error is reported to the Observer.
type Maintainer interface {
	// Maintain runs one round of housekeeping. It may return early, and
	// does nothing when another round is running.
	Maintain(ctx context.Context) error
}

// Tallier is implemented by backends that keep a record's counts of
// replays and rejections (Record.Replays and the like). The Store gathers
// counts in memory and hands them over in batches, off the request path.
type Tallier interface {
	// AddTallies adds each tally's counts to its record, if it still
	// exists. A batch may hold several tallies of one record.
	AddTallies(ctx context.Context, tallies []Tally) error
}

// CountLedger is implemented by a Tallier that one process opens at a
// time (the embedded store) and that keeps, for the Store, a small record
// of its counting: since when counts may still be in the Store's memory
// and not in the backend, and the periods in which counts were lost (a
// crash, a full table of pending counts, a failed flush). The Store
// encodes the ledger; the backend stores its bytes as they are. With it
// the Store can tell an exact count from a lower bound (Record.
// CountsApproximate); a Store over a Tallier without one reports every
// count as a lower bound, since it cannot know what another process lost.
type CountLedger interface {
	// LoadCountLedger returns the bytes SaveCountLedger saved last, or
	// nil if none were.
	LoadCountLedger(ctx context.Context) ([]byte, error)
	// SaveCountLedger replaces them durably.
	SaveCountLedger(ctx context.Context, ledger []byte) error
}

// Transactor is implemented by backends that can run an effect's writes in
// one transaction with the claim's completion (TxBackend). Recovery
// releases a stale claim that Transactional reports without asking the
// Resolver: such an effect committed exactly when its record is done, and
// once the claim is released its fenced completion, and so its writes, can
// never commit.
type Transactor interface {
	// Transactional reports whether rec's current claim runs its effect in
	// such a transaction (the backend marks the claim when it starts one).
	Transactional(rec *Record) bool
}

// TxBackend is implemented by backends that run an effect's writes in one
// transaction with its claim's completion, so that the effect committed
// exactly when its record is done: idem.DoTx runs effects so. Tx is the
// handle the effect writes with (pgx.Tx for pgstore).
type TxBackend[Tx any] interface {
	Transactor
	// BeginTx prepares the transaction of one effect on (scope, key). It
	// returns the context the claim is taken with (the backend marks a
	// claim taken with it as transactional, before the effect can write)
	// and the effect's transaction, not open yet.
	BeginTx(ctx context.Context, scope, key string) (context.Context, TxEffect[Tx])
}

// TxEffect is one effect's transaction (TxBackend.BeginTx). The Store
// opens it when the effect starts, commits it with the completion when
// the error policy saves the outcome, and rolls it back otherwise (a
// release, a hold, a panic, a claim that was not won).
type TxEffect[Tx any] interface {
	Committer
	// Open starts the transaction and returns the context and the handle
	// the effect runs with. Its error is the effect's: the claim is then
	// released, as for an effect that failed.
	Open(ctx context.Context) (context.Context, Tx, error)
}

// Holder is implemented by backends that keep, with a claim the Store
// holds for recovery, why it holds it: the note (Attempt.Reason) of the
// claim's open attempt, so that the record's story says, for example,
// "panic" whichever process later resolves the claim. Without it the
// Store holds a claim with Extend and keeps the note in memory, for its
// own recovery only.
type Holder interface {
	// Hold moves the claim's lease end to leaseEnds, as Extend does, and
	// sets the note of the attempt of token to note, in one atomic write
	// fenced like Extend's.
	Hold(ctx context.Context, scope, key string, token uint64, leaseEnds time.Time, note string) error
}

// Resealer is implemented by backends that can replace the result of a
// done record in place, which Store.Rekey does to seal results again
// under the keyring's active key.
type Resealer interface {
	// Reseal sets the Result of the record of (scope, key) to res if it is
	// done with token, and changes nothing else (state, story, counts,
	// times, expiry). Otherwise it returns an error wrapping ErrFenced and
	// changes nothing. The fence is enough: a done record's result never
	// changes while its token stays, but through Reseal, which only writes
	// the same result sealed again.
	Reseal(ctx context.Context, scope, key string, token uint64, res Result) error
}

// Committer commits an effect's own writes together with its claim's
// completion, in one transaction of the backend's (TxEffect).
type Committer interface {
	// Commit writes comp to the record of (scope, key) in the effect's
	// transaction, fenced by token, and commits both. On any error neither is
	// committed (the transaction is rolled back), except when the commit's
	// answer was lost, which the error then wraps ErrUnavailable for. A
	// refused fence is an error wrapping ErrFenced.
	Commit(ctx context.Context, scope, key string, token uint64, comp Completion) error
	// Rollback undoes the effect's writes. It is called when the outcome is
	// not saved (a release, a hold, a panic), before the claim ends, and
	// may be called after Commit.
	Rollback(ctx context.Context)
}

// Durability says when a write counts as done.
type Durability uint8

const (
	// Durable, the default, syncs every commit to the disk before it is
	// acknowledged: a claim is durable before its effect runs and a result
	// before the caller is answered, even across a power loss.
	Durable Durability = iota
	// Fast acknowledges a commit once it is in the operating system's page
	// cache. It survives a crash of the process but not of the machine: a
	// power loss can forget claims and results, and so let an effect run
	// twice. Use it only where that is acceptable.
	Fast
)

// String returns "durable" or "fast".
func (d Durability) String() string {
	if d == Fast {
		return "fast"
	}
	return "durable"
}

// LossNote is the note (Attempt.Reason) a backend gives a claim on a key
// whose latest write a loss may have taken (LossKeeper): the Store asks
// the Resolver before such a claim's effect runs.
const LossNote = "claimed during a loss window: asked first"

// LossKeeper is implemented by backends that can come back from a failure
// with less than they held, and know it (the embedded store opened with
// AcceptLoss). Until the window ends, a claim on a key absent, or released
// or expired before the loss, carries LossNote.
type LossKeeper interface {
	// OpenLossWindow opens the window, if an open accepted a loss, lasting
	// length from now unless the backend was told otherwise. The Store
	// calls it once, when it is created.
	OpenLossWindow(now time.Time, length time.Duration) error
}
