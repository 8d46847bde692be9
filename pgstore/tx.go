package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/idemkit/idem"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotPostgres is returned by DoTx when the store's backend is not a
// *Backend: the effect's transaction and the record must share a database.
var ErrNotPostgres = errors.New("pgstore: DoTx on a store whose backend is not a pgstore.Backend")

// txNote is the note a transactional claim's attempt carries while it is
// open (see Transactional): it is the mark recovery reads, and shows in the
// key's story.
const txNote = "transactional"

var _ idem.Transactor = (*Backend)(nil)

// DoTx runs fn once for req's key, as Store.Do does, with a PostgreSQL
// transaction on the store's pool: fn writes its effect with tx, and when
// the error policy saves the outcome, the record's completion is written in
// the same transaction, fenced by the claim's token (the record's row locked
// by the UPDATE and its token checked), and the two commit together. It is
// the way to run effects whose writes live in the same database.
//
// So the effect committed exactly when the record is done: a holder that
// was paused (a GC pause, a stopped VM, a delayed network path) while its
// claim went stale and was recovered finds the token changed, and its
// transaction is rolled back instead of committed; Do then returns an error
// wrapping idem.ErrFenced and fn's writes never happened. Recovery needs no
// Resolver for such claims (idem.Transactor): the claim is taken marked as
// transactional, and a stale one is released as "transactional effect not
// committed".
//
// The round trips are those of Do with a separate write: the claim (marked
// in the same statements), fn's statements, the BEGIN sent with fn's first
// one (pgx.Batch.BeginTx), and the completion sent with the COMMIT.
//
// When the policy releases or holds the claim, or fn panics, the
// transaction is rolled back first. After a panic the claim is released,
// with or without a Resolver (the effect did not commit), and the panic is
// re-raised. fn must not commit or roll back tx
// itself: tx's Commit and Rollback return ErrTxOwned and leave the
// transaction to DoTx. The transaction holds one pooled connection for fn's
// duration while the heartbeat needs another: size the pool for that. If
// the commit's answer is lost with the connection, DoTx reports the outcome
// as not recorded (an error wrapping idem.ErrUnavailable) although both may
// have committed; the next request then replays the result.
//
// DoTx returns ErrNotPostgres when store's Backend is not a *Backend.
func DoTx(ctx context.Context, store *idem.Store, req idem.Request, fn func(ctx context.Context, tx pgx.Tx) (idem.Result, error)) (idem.Result, bool, error) {
	b, ok := store.Backend().(*Backend)
	if !ok {
		return idem.Result{}, false, ErrNotPostgres
	}
	e := &txEffect{b: b}
	// A safety net: DoCommit ends the transaction on every path it
	// reaches fn by; this returns the connection if a path does not.
	defer e.Rollback(context.WithoutCancel(ctx))
	run := func(ctx context.Context) (idem.Result, error) {
		conn, err := b.pool.Acquire(ctx)
		if err != nil {
			return idem.Result{}, b.fail(ctx, "begin", err)
		}
		e.tx = &lazyTx{ctx: ctx, conn: conn}
		// fn's own claims (a nested Do) are not DoTx's.
		return fn(context.WithValue(ctx, txClaimKey{}, (*txMark)(nil)), e.tx)
	}
	ctx = context.WithValue(ctx, txClaimKey{}, &txMark{scope: req.Scope, key: req.Key})
	return store.DoCommit(ctx, req, run, e)
}

// txClaimKey is the context key under which DoTx asks Backend.Claim to take
// its key's claim marked (txMark).
type txClaimKey struct{}

// txMark names the key whose claim DoTx is taking.
type txMark struct{ scope, key string }

// txMarked reports whether ctx is DoTx's, claiming scope and key: the
// claim's attempt is then written with txNote, the mark recovery reads.
// The mark goes with the claim, before fn can write anything, and fn
// writes only in the transaction the completion commits, so a marked claim
// that is still open has committed no effect.
func txMarked(ctx context.Context, scope, key string) bool {
	m, _ := ctx.Value(txClaimKey{}).(*txMark)
	return m != nil && m.scope == scope && m.key == key
}

// Transactional implements idem.Transactor: rec's open attempt carries the
// mark DoTx's claim wrote.
func (b *Backend) Transactional(rec *idem.Record) bool {
	if rec.State != idem.StateInProgress || len(rec.Attempts) == 0 {
		return false
	}
	a := rec.Attempts[len(rec.Attempts)-1]
	return a.Token == rec.Token && a.EndedAt.IsZero() && a.Reason == txNote
}

// fencedText is the text whose failing cast aborts DoTx's transaction when
// the fence refuses its completion (queries.completeTx); it shows in the
// server's log.
const fencedText = "pgstore: completion fenced: claim recovered"

// txEffect is DoTx's idem.Committer: the transaction fn wrote with.
type txEffect struct {
	b  *Backend
	tx *lazyTx // nil until fn ran
}

// Commit implements idem.Committer: the fenced completion in the effect's
// transaction and the commit, sent together.
func (e *txEffect) Commit(ctx context.Context, c *idem.Claim, comp idem.Completion) error {
	if e.tx == nil {
		return errors.New("pgstore: DoTx: no transaction to commit")
	}
	defer e.Rollback(ctx)
	res, err := encodeResult(&comp.Result)
	if err != nil {
		return err
	}
	token := c.Token()
	fenced := &idem.FencedError{Scope: c.Scope(), Key: c.Key(), Token: token}
	if token == 0 || token > math.MaxInt64 {
		return fenced
	}
	if e.b.closed.Load() {
		return fmt.Errorf("pgstore: complete: %w", idem.ErrClosed)
	}
	qctx, cancel := e.b.ctx(ctx)
	defer cancel()
	args := append([]any{c.Scope(), c.Key(), int64(token), res, encodeTime(comp.At), encodeTime(comp.ExpiresAt),
		text(comp.Recovered)}, ending(comp.Ending)...)
	op, err := e.tx.commitWith(qctx, e.b.q.completeTx, args)
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "22P02" /* invalid_text_representation */ && strings.Contains(pe.Message, fencedText):
		return fenced
	case err != nil:
		return e.b.fail(ctx, op, err)
	}
	return nil
}

// Rollback implements idem.Committer. After a commit it does nothing.
func (e *txEffect) Rollback(ctx context.Context) {
	if e.tx == nil {
		return
	}
	qctx, cancel := e.b.ctx(ctx)
	defer cancel()
	e.tx.end(qctx)
}
