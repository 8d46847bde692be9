package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/idemkit/idem"
	"github.com/jackc/pgx/v5"
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
// Resolver for such claims (idem.Transactor): a stale one is released as
// "transactional effect not committed".
//
// When the policy releases or holds the claim, or fn panics, the
// transaction is rolled back first. fn must not commit or roll back tx
// itself; if it does, the completion fails and nothing is saved. The
// transaction holds one pooled connection for fn's duration while the
// heartbeat needs another: size the pool for that. If the commit's answer
// is lost with the connection, DoTx reports the outcome as not recorded
// (an error wrapping idem.ErrUnavailable) although both may have
// committed; the next request then replays the result.
//
// DoTx returns ErrNotPostgres when store's Backend is not a *Backend.
func DoTx(ctx context.Context, store *idem.Store, req idem.Request, fn func(ctx context.Context, tx pgx.Tx) (idem.Result, error)) (idem.Result, bool, error) {
	b, ok := store.Backend().(*Backend)
	if !ok {
		return idem.Result{}, false, ErrNotPostgres
	}
	e := &txEffect{b: b}
	run := func(ctx context.Context) (idem.Result, error) {
		c, _ := idem.ClaimFromContext(ctx)
		if err := b.markTransactional(ctx, c); err != nil {
			return idem.Result{}, err
		}
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			return idem.Result{}, b.fail(ctx, "begin", err)
		}
		e.tx = tx
		return fn(ctx, tx)
	}
	return store.DoCommit(ctx, req, run, e)
}

// markTransactional notes on c's open attempt that its effect runs in a
// transaction with the completion, before that transaction starts: a claim
// whose holder dies before the mark is written is left to the Resolver,
// which is the safe side.
func (b *Backend) markTransactional(ctx context.Context, c *idem.Claim) error {
	return b.fenced(ctx, "mark", c.Scope(), c.Key(), c.Token(), b.q.markTx, txNote)
}

// Transactional implements idem.Transactor: rec's open attempt carries the
// mark DoTx wrote before its transaction began.
func (b *Backend) Transactional(rec *idem.Record) bool {
	if rec.State != idem.StateInProgress || len(rec.Attempts) == 0 {
		return false
	}
	a := rec.Attempts[len(rec.Attempts)-1]
	return a.Token == rec.Token && a.EndedAt.IsZero() && a.Reason == txNote
}

// txEffect is DoTx's idem.Committer: the transaction fn wrote with.
type txEffect struct {
	b  *Backend
	tx pgx.Tx // nil until fn's transaction began
}

// Commit implements idem.Committer: the fenced completion in the effect's
// transaction, then the commit.
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
	tag, err := e.tx.Exec(qctx, e.b.q.complete, args...)
	if err != nil {
		return e.b.fail(ctx, "complete", err)
	}
	if tag.RowsAffected() == 0 {
		return fenced
	}
	if err := e.tx.Commit(qctx); err != nil {
		return e.b.fail(ctx, "commit", err)
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
	_ = e.tx.Rollback(qctx)
}
