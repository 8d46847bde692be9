package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/jackc/pgx/v5/pgconn"
)

// maxRetries bounds how often run repeats a call whose statement certainly
// had no effect: a serialization failure, a deadlock, or a connection that
// failed before anything was sent (a pooled connection the server had
// closed, as after a failover). Between attempts it waits a jittered
// back-off, from retryBase doubling to at most retryMax, so that
// transactions that failed each other do not collide again at once.
const (
	maxRetries = 8
	retryBase  = time.Millisecond
	retryMax   = 50 * time.Millisecond
)

// run calls fn with a context bounded by the statement timeout, repeats it
// while its error is certain to have left nothing behind, and maps the
// error it ends with.
func (b *Backend) run(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	if b.closed.Load() {
		return fmt.Errorf("pgstore: %s: %w", op, backend.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return b.fail(ctx, op, err)
	}
	qctx, cancel := b.ctx(ctx)
	defer cancel()
	var err error
	for attempt := 0; ; attempt++ {
		err = fn(qctx)
		if err == nil || attempt+1 >= maxRetries || qctx.Err() != nil || !retryable(err) {
			break
		}
		wait := min(retryBase<<attempt, retryMax)
		wait = wait/2 + rand.N(wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-qctx.Done():
			t.Stop()
		}
	}
	if err != nil && qctx.Err() != nil && !errors.Is(err, qctx.Err()) {
		// The driver's error may not say that a deadline cut it short.
		err = fmt.Errorf("%w: %w", qctx.Err(), err)
	}
	return b.fail(ctx, op, err)
}

// retryable reports whether err certainly left the database unchanged and
// may go away if the statement is sent again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "40P01": // serialization_failure, deadlock_detected
			return true
		}
		return false
	}
	return pgconn.SafeToRetry(err)
}

// fail maps an error of a call on ctx to what the backend.Backend contract
// asks for. The errors the backend makes itself (fenced, not found,
// corrupt, invalid key, closed) pass unchanged; the caller's cancellation
// is reported as such; every other error, a deadline included, means the
// storage could not answer, and wraps backend.ErrUnavailable.
func (b *Backend) fail(ctx context.Context, op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, backend.ErrFenced), errors.Is(err, backend.ErrNotFound), errors.Is(err, backend.ErrCorrupt),
		errors.Is(err, backend.ErrInvalidKey), errors.Is(err, backend.ErrClosed), errors.Is(err, backend.ErrUnavailable):
		return err
	case errors.Is(ctx.Err(), context.Canceled):
		return fmt.Errorf("pgstore: %s: %w", op, ctx.Err())
	}
	return &unavailableError{op: op, err: err}
}

// unavailableError is a storage failure: it matches backend.ErrUnavailable and
// keeps its cause (a *pgconn.PgError, a network error, a deadline) visible
// to errors.Is and errors.As.
type unavailableError struct {
	op  string
	err error
}

func (e *unavailableError) Error() string {
	return "pgstore: " + e.op + ": storage unavailable: " + e.err.Error()
}

func (e *unavailableError) Unwrap() []error { return []error{backend.ErrUnavailable, e.err} }

// Errors of New and of transactional effects.
var (
	// ErrSchemaVersion is returned by New when the tables were created or
	// upgraded by a newer release of pgstore than this one, which must not
	// write to them.
	ErrSchemaVersion = errors.New("pgstore: schema version is newer than this release")

	// ErrNotFailoverSafe is returned by New with Options.FailoverSafe when
	// the server can acknowledge a commit before a synchronous standby has
	// it (or is itself a standby); the error names the setting.
	ErrNotFailoverSafe = errors.New("pgstore: the server acknowledges commits before a standby has them")

	// ErrTxOwned is returned by Commit and Rollback of the transaction idem.DoTx
	// gives its effect: DoTx ends it, with the completion, and nothing else may.
	ErrTxOwned = errors.New("pgstore: DoTx's transaction is committed or rolled back by DoTx, not by fn")
)
