package idem

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/keyring"
)

// Defaults for zero Options fields. Retention and Lease are exported for
// callers that size their own timings from them.
const (
	DefaultRetention      = 24 * time.Hour
	DefaultLease          = 30 * time.Second
	defaultSweepInterval  = 10 * time.Second
	defaultCountInterval  = 10 * time.Second
	defaultMaxUnknown     = 10
	defaultRecheckBackoff = time.Second
	defaultCloseTimeout   = 30 * time.Second
	maxRecheckBackoff     = 10 * time.Minute
)

// minLease is the shortest lease: Do's heartbeat extends it every Lease/3.
const minLease = time.Millisecond

// Validate reports the options that make no sense, defaults filled in: a
// negative duration or count where zero means the default, a lease shorter
// than a millisecond, a Retention shorter than the Lease (a retry after
// a lease ran out would find the record gone and run the effect again), a
// SweepInterval longer than the Retention (expired records would outlive
// it by more than it), and a Durability that is neither Durable nor Fast.
// It returns nil or an error joining one *OptionsError per field, which
// matches ErrInvalidOptions. Open calls it; New panics with its error, as
// a constructor does on bad configuration, so call it first when the
// options come from a configuration file.
func (o *Options) Validate() error {
	if o == nil {
		return nil
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &OptionsError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"Retention", o.Retention}, {"Lease", o.Lease}, {"RecheckBackoff", o.RecheckBackoff},
		{"CloseTimeout", o.CloseTimeout}, {"CountInterval", o.CountInterval}} {
		if d.v < 0 {
			bad(d.field, "negative (%s); zero means the default", d.v)
		}
	}
	if o.MaxUnknown < 0 {
		bad("MaxUnknown", "negative (%d); zero means the default", o.MaxUnknown)
	}
	if o.Lease > 0 && o.Lease < minLease {
		bad("Lease", "%s is shorter than %s (the heartbeat extends it every Lease/3)", o.Lease, minLease)
	}
	if o.Durability != Durable && o.Durability != Fast {
		bad("Durability", "unknown value %d", o.Durability)
	}
	if errs != nil {
		// The relations below compare defaults filled in; a negative
		// field would only repeat itself there.
		return errors.Join(errs...)
	}
	c := o.withDefaults()
	if c.Retention < c.Lease {
		bad("Retention", "%s is shorter than Lease (%s): a retry after the lease ran out would find the "+
			"record gone and run the effect again", c.Retention, c.Lease)
	}
	if c.SweepInterval > c.Retention {
		bad("SweepInterval", "%s is longer than Retention (%s)", c.SweepInterval, c.Retention)
	}
	return errors.Join(errs...)
}

// Options configure a Store. Nil Options, and every zero field, mean the
// documented default.
type Options struct {
	// Retention is how long a done record replays before it expires and a
	// repeat runs again. Set it longer than the longest pause any run can
	// take (retries, a resumed agent run). Default 24 hours. A Request may
	// override it. At least the Lease.
	Retention time.Duration

	// Lease is how long a claim stays live without a heartbeat. Do extends
	// it every Lease/3 while the effect runs, so only a dead or hung holder
	// lets it end. Default 30 seconds.
	Lease time.Duration

	// Durability says whether commits are synced to disk (Durable, the
	// default) or only survive a process crash (Fast). Open gives it to the
	// embedded backend; a backend given to New has a setting of its own
	// (badgerstore.Options, pgstore.Options).
	Durability Durability

	// Resolver answers, for a stale claim, whether its effect happened
	// downstream. Nil means stale claims stay in progress and are reported
	// (ErrOutcomeUnknown), never silently run again.
	Resolver Resolver

	// RecoveryGrace is how long past its lease's end a stale claim taken by
	// another live instance (another Owner; not one orphaned by a restart)
	// waits before it goes to the Resolver: a holder that was paused (a GC
	// pause, a stopped VM or container, a network path holding its writes)
	// may still be acting on it, and its effect's write may still arrive.
	// A claim this instance held for the Resolver (the Policy's
	// DecisionHold, Claim.Hold, a panic) waits too, from the hold: its
	// outcome was unknown, typically a write whose answer never came, and
	// that write may still arrive. Default the Lease; negative means no
	// grace. Other claims of this instance, orphaned ones and transactional
	// ones (DoTx) do not wait.
	//
	// What remains: an effect that is neither transactional nor fenced
	// downstream (a write that refuses older fencing tokens) and whose holder
	// pauses for longer than the lease plus the grace can still take effect
	// after the Resolver answered "not committed", so it may run twice. The
	// grace narrows that window; only DoTx or fencing closes it.
	RecoveryGrace time.Duration

	// SweepInterval is how often the background sweep recovers stale claims
	// and reclaims expired records. Default 10 seconds, or the Retention if
	// shorter; negative disables the background sweep (call Sweep
	// yourself). Longer than the Retention is refused.
	SweepInterval time.Duration

	// CountInterval is how often the replays and rejections counted in
	// memory are written to the backend: each record counted is written at
	// most once an interval (and at Sweep and Close), however often it was
	// replayed. A crash loses at most the counts of the last interval,
	// and the records concerned then read as approximate (a lower bound;
	// docs/contract.md, "Counts"). Default 10 seconds.
	CountInterval time.Duration

	// MaxUnknown is how many inconclusive resolver answers a claim gets
	// before it is marked as needing attention. Default 10.
	MaxUnknown int

	// RecheckBackoff is the wait before asking the resolver again after an
	// inconclusive answer; it doubles with every answer, up to ten minutes.
	// Default 1 second.
	RecheckBackoff time.Duration

	// Policy decides what Do does with each outcome. Default DefaultPolicy.
	Policy Policy

	// Clock is the store's time. Default the system clock (SystemClock),
	// which the store reads as a wall-clock reading at most a second old
	// advanced by the monotonic clock: one clock read per request. A replay
	// of a record with over a minute to live reads none: it is judged on a
	// reading refreshed every 100 ms in the background (see Caveats in the
	// package documentation). Any other Clock is read on every request.
	Clock Clock

	// Observer receives every transition. Default none.
	Observer Observer

	// ErrorText turns the error an effect returned into the text Do keeps
	// in the record: the saved error a replay returns (SavedError) and the
	// reason a released attempt's story gives. An error's own text may
	// carry secrets (tokens, account numbers, queries), and records are
	// exported and replayed to every caller of the key, so the default,
	// DefaultErrorText, keeps only a generic word. The Observer still gets
	// the error itself (Event.Err); the Logger logs its full text unless
	// ErrorText is set, in which case it logs what ErrorText returns.
	ErrorText func(error) string

	// Logger, if set, logs every transition (routine ones at Debug,
	// rejections and recoveries at Info, attention and effects that may
	// have run twice at Warn, errors at Error) with the scope, key and
	// token as attributes, and, under Open, the engine's warnings.
	Logger *slog.Logger

	// Owner names this process in the claims it takes (Record.Owner), so
	// that an operator can tell who held a stuck claim. Default the host
	// name, the process id and a random suffix.
	Owner string

	// CloseTimeout bounds how long Close waits for running effects and open
	// claims to finish before closing the storage under them (their claims
	// are then recovered on the next open). Default 30 seconds.
	CloseTimeout time.Duration

	// MemoryBudget bounds, in bytes, the memory the store holds in the host
	// process: under Open, Badger's memtables (B/32 each; two may wait for
	// their flush, one below the default budget), index cache (B/32) and
	// table builders (tables of B/128), and on every backend the Store's
	// replay cache (B/5, scaled by B/64 MiB below the default budget) and
	// the replays and rejections counted between two flushes (B/16 KiB
	// records). Default 64 MiB; values under 16 MiB are raised to 16
	// (backend.DefaultMemoryBudget, MinMemoryBudget). It bounds live bytes: the process's resident memory also holds
	// the garbage collector's headroom (GOGC), which the host sets (with
	// GOMEMLIMIT), not a library, and Badger's compaction can briefly
	// exceed its share. Mapped table files are page cache, not counted.
	// docs/memory.md has the split and what it holds.
	MemoryBudget int64

	// Keys, if set, encrypts what a record keeps of the caller's data (a
	// result's body and headers, a saved error's text, a Journal's
	// arguments) with the ring's active key before any backend sees it,
	// and decrypts it on replay and in Get (package keyring,
	// docs/encryption.md). Records sealed under older keys of the ring stay
	// readable; records written before encryption was turned on too. A
	// record sealed under a key the ring does not hold is refused with a
	// *MissingKeyError (ErrMissingKey), never replayed or run again.
	// Scopes, keys, fingerprints, states, times, tokens, counts and status
	// codes stay in clear: keys and scopes must not carry secrets. Default
	// none: results are stored as they are, and a sealed one is refused
	// with ErrMissingKey.
	Keys *keyring.Ring
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Retention <= 0 {
		c.Retention = DefaultRetention
	}
	if c.Lease <= 0 {
		c.Lease = DefaultLease
	}
	if c.RecoveryGrace == 0 {
		c.RecoveryGrace = c.Lease
	}
	if c.RecoveryGrace < 0 {
		c.RecoveryGrace = 0
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = min(defaultSweepInterval, c.Retention)
	}
	if c.CountInterval <= 0 {
		c.CountInterval = defaultCountInterval
	}
	if c.MaxUnknown <= 0 {
		c.MaxUnknown = defaultMaxUnknown
	}
	if c.RecheckBackoff <= 0 {
		c.RecheckBackoff = defaultRecheckBackoff
	}
	if c.Policy == nil {
		c.Policy = DefaultPolicy
	}
	if c.Clock == nil {
		c.Clock = SystemClock()
	}
	if c.CloseTimeout <= 0 {
		c.CloseTimeout = defaultCloseTimeout
	}
	c.MemoryBudget = backend.MemoryBudget(c.MemoryBudget)
	var obs multiObserver
	if c.Observer != nil {
		obs = append(obs, c.Observer)
	}
	if c.Logger != nil {
		obs = append(obs, slogObserver(c.Logger, c.ErrorText))
	}
	switch len(obs) {
	case 0:
		c.Observer = nil
	case 1:
		c.Observer = obs[0]
	default:
		c.Observer = obs
	}
	return c
}
