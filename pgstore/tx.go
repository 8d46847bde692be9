package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/idemkit/idem/backend"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// txNote is the note a transactional claim's attempt carries while it is
// open (see Transactional): it is the mark recovery reads, and shows in the
// key's story.
const txNote = "transactional"

var _ backend.TxBackend[pgx.Tx] = (*Backend)(nil)

// BeginTx implements backend.TxBackend for idem.DoTx: the effect writes
// with a pgx.Tx on the store's pool, and the record's completion is
// written in the same transaction, fenced by the claim's token (the
// record's row locked by the UPDATE and its token checked), and the two
// commit together.
//
// The claim is taken marked as transactional (in the same statements), so
// recovery releases a stale one as "transactional effect not committed"
// without asking a Resolver. The round trips are those of Do with a
// separate write: the claim, the effect's statements, the BEGIN sent with
// the first of them (pgx.Batch.BeginTx), and the completion sent with the
// COMMIT.
//
// The effect must not commit or roll back tx itself: tx's Commit and
// Rollback return ErrTxOwned. The transaction holds one pooled connection
// for the effect's duration while the heartbeat needs another: size the
// pool for that. If the commit's answer is lost with the connection, the
// outcome is reported as not recorded (an error wrapping
// backend.ErrUnavailable) although both may have committed; the next
// request then replays the result.
func (b *Backend) BeginTx(ctx context.Context, scope, key string) (context.Context, backend.TxEffect[pgx.Tx]) {
	return context.WithValue(ctx, txClaimKey{}, &txMark{scope: scope, key: key}), &txEffect{b: b}
}

// Open implements backend.TxEffect: it takes a pooled connection for the
// effect's transaction, which begins with the effect's first statement.
func (e *txEffect) Open(ctx context.Context) (context.Context, pgx.Tx, error) {
	conn, err := e.b.pool.Acquire(ctx)
	if err != nil {
		return ctx, nil, e.b.fail(ctx, "begin", err)
	}
	e.tx = &lazyTx{ctx: ctx, conn: conn}
	// The effect's own claims (a nested Do) are not DoTx's.
	return context.WithValue(ctx, txClaimKey{}, (*txMark)(nil)), e.tx, nil
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

// Transactional implements backend.Transactor: rec's open attempt carries the
// mark DoTx's claim wrote.
func (b *Backend) Transactional(rec *backend.Record) bool {
	if rec.State != backend.StateInProgress || len(rec.Attempts) == 0 {
		return false
	}
	a := rec.Attempts[len(rec.Attempts)-1]
	return a.Token == rec.Token && a.EndedAt.IsZero() && a.Reason == txNote
}

// fencedText is the text whose failing cast aborts DoTx's transaction when
// the fence refuses its completion (queries.completeTx); it shows in the
// server's log.
const fencedText = "pgstore: completion fenced: claim recovered"

// txEffect is DoTx's backend.Committer: the transaction fn wrote with.
type txEffect struct {
	b  *Backend
	tx *lazyTx // nil until fn ran
}

// Commit implements backend.Committer: the fenced completion in the effect's
// transaction and the commit, sent together.
func (e *txEffect) Commit(ctx context.Context, scope, key string, token uint64, comp backend.Completion) error {
	if e.tx == nil {
		return errors.New("pgstore: DoTx: no transaction to commit")
	}
	defer e.Rollback(ctx)
	res := backend.EncodeResult(&comp.Result)
	fenced := &backend.FencedError{Scope: scope, Key: key, Token: token}
	if token == 0 || token > math.MaxInt64 {
		return fenced
	}
	if e.b.closed.Load() {
		return fmt.Errorf("pgstore: complete: %w", backend.ErrClosed)
	}
	qctx, cancel := e.b.ctx(ctx)
	defer cancel()
	args := append([]any{scope, key, int64(token), res, encodeTime(comp.At), encodeTime(comp.ExpiresAt),
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

// Rollback implements backend.Committer. After a commit it does nothing.
func (e *txEffect) Rollback(ctx context.Context) {
	if e.tx == nil {
		return
	}
	qctx, cancel := e.b.ctx(ctx)
	defer cancel()
	e.tx.end(qctx)
}
