package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lazyTx is the pgx.Tx DoTx gives fn, on a connection DoTx holds. Its
// BEGIN goes with fn's first Exec, Query, QueryRow or SendBatch, in one
// batch (pgx.Batch.BeginTx), instead of taking a round trip of its own;
// the calls that cannot carry it (CopyFrom, Prepare, LargeObjects, Conn, a
// nested Begin) send it first. Every later call goes to the transaction
// begun. DoTx ends it: commitWith sends the completion with the COMMIT, end
// rolls back what was not committed and returns the connection.
//
// Like any pgx.Tx it is for one goroutine at a time.
type lazyTx struct {
	// ctx is fn's, for the one method pgx.Tx gives none (LargeObjects).
	ctx       context.Context
	conn      *pgxpool.Conn // nil once ended
	tx        pgx.Tx        // nil until begun
	committed bool
}

var _ pgx.Tx = (*lazyTx)(nil)

// begin begins the transaction on its own, unless it has begun.
func (t *lazyTx) begin(ctx context.Context) (pgx.Tx, error) {
	switch {
	case t.conn == nil:
		return nil, pgx.ErrTxClosed
	case t.tx != nil:
		return t.tx, nil
	}
	tx, err := t.conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	t.tx = tx
	return tx, nil
}

// carries reports whether a call with args may carry the BEGIN: the
// transaction has not begun, and args name no query mode (a batch runs in
// the connection's).
func (t *lazyTx) carries(args []any) bool {
	if t.conn == nil || t.tx != nil {
		return false
	}
	for _, a := range args { // the options lead the arguments
		if _, ok := a.(pgx.QueryExecMode); ok {
			return false
		}
		if _, ok := a.(pgx.QueryRewriter); !ok {
			break
		}
	}
	return true
}

// beginWith sends b, which begins with BEGIN (Batch.BeginTx), and returns
// its results with BEGIN's read.
func (t *lazyTx) beginWith(ctx context.Context, b *pgx.Batch) (pgx.BatchResults, error) {
	br := t.conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	t.tx = br.Tx()
	return br, nil
}

// queued is a batch of BEGIN and one query.
func queued(sql string, args []any) *pgx.Batch {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(sql, args...)
	return b
}

// failed returns batch results that report err from every method, for
// the Rows and Row of a call that failed before it was sent.
func failed(err error) pgx.BatchResults { return pgx.FailedBatchResults(&pgx.Batch{}, err) }

// Exec implements pgx.Tx.
func (t *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !t.carries(args) {
		tx, err := t.begin(ctx)
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		return tx.Exec(ctx, sql, args...)
	}
	br, err := t.beginWith(ctx, queued(sql, args))
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// Query implements pgx.Tx.
func (t *lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !t.carries(args) {
		tx, err := t.begin(ctx)
		if err != nil {
			return failed(err).Query()
		}
		return tx.Query(ctx, sql, args...)
	}
	br, err := t.beginWith(ctx, queued(sql, args))
	if err != nil {
		return failed(err).Query()
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return rows, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// QueryRow implements pgx.Tx.
func (t *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !t.carries(args) {
		tx, err := t.begin(ctx)
		if err != nil {
			return failed(err).QueryRow()
		}
		return tx.QueryRow(ctx, sql, args...)
	}
	rows, _ := t.Query(ctx, sql, args...)
	return firstRow{rows}
}

// SendBatch implements pgx.Tx: BEGIN is queued before b's queries, and its
// result read before the results are returned.
func (t *lazyTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if !t.carries(nil) {
		tx, err := t.begin(ctx)
		if err != nil {
			return pgx.FailedBatchResults(b, err)
		}
		return tx.SendBatch(ctx, b)
	}
	nb := &pgx.Batch{}
	nb.BeginTx(pgx.TxOptions{})
	nb.QueuedQueries = append(nb.QueuedQueries, b.QueuedQueries...)
	br, err := t.beginWith(ctx, nb)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return br
}

// Begin implements pgx.Tx: a savepoint in the transaction.
func (t *lazyTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Begin(ctx)
}

// Commit implements pgx.Tx: it returns ErrTxOwned, and commits nothing.
func (t *lazyTx) Commit(context.Context) error { return ErrTxOwned }

// Rollback implements pgx.Tx: it returns ErrTxOwned, and rolls nothing
// back; so a deferred Rollback in fn leaves the transaction to DoTx.
func (t *lazyTx) Rollback(context.Context) error { return ErrTxOwned }

// CopyFrom implements pgx.Tx.
func (t *lazyTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return 0, err
	}
	return tx.CopyFrom(ctx, table, columns, src)
}

// Prepare implements pgx.Tx.
func (t *lazyTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	tx, err := t.begin(ctx)
	if err != nil {
		return nil, err
	}
	return tx.Prepare(ctx, name, sql)
}

// LargeObjects implements pgx.Tx. If the transaction cannot begin, every
// call of the result fails.
func (t *lazyTx) LargeObjects() pgx.LargeObjects {
	tx, err := t.begin(t.ctx)
	if err != nil {
		b := &pgx.Batch{}
		b.BeginTx(pgx.TxOptions{})
		return pgx.FailedBatchResults(b, err).Tx().LargeObjects()
	}
	return tx.LargeObjects()
}

// Conn implements pgx.Tx: the connection, with the transaction begun on
// it. It is nil once DoTx ended the transaction.
func (t *lazyTx) Conn() *pgx.Conn {
	if t.conn == nil {
		return nil
	}
	_, _ = t.begin(t.ctx) // a failure shows in the connection's next call
	return t.conn.Conn()
}

// commitWith sends the statement sql (DoTx's completion) and the COMMIT in
// one batch; when fn wrote nothing, there is no transaction and the
// statement is sent alone. op names the step that failed.
func (t *lazyTx) commitWith(ctx context.Context, sql string, args []any) (op string, err error) {
	switch {
	case t.conn == nil:
		return "complete", pgx.ErrTxClosed
	case t.tx == nil:
		_, err := t.conn.Exec(ctx, sql, args...)
		return "complete", err
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	b.Queue("commit")
	br := t.conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return "complete", err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return "commit", err
	case tag.String() != "COMMIT":
		return "commit", pgx.ErrTxCommitRollback
	}
	t.committed = true
	return "", nil
}

// end rolls back what was begun and not committed, and returns the
// connection to the pool (which closes it if it is not idle). It may be
// called more than once.
func (t *lazyTx) end(ctx context.Context) {
	if t.conn == nil {
		return
	}
	if t.tx != nil && !t.committed {
		_, _ = t.conn.Exec(ctx, "rollback")
	}
	t.conn.Release()
	t.conn, t.tx = nil, nil
}

// batchRows are the rows of the query sent with BEGIN: closing them
// closes the batch, as reading them to the end does.
type batchRows struct {
	pgx.Rows
	br  pgx.BatchResults // nil once closed
	err error            // the batch's
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if r.br != nil {
		r.err = r.br.Close()
		r.br = nil
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// firstRow is a pgx.Row over rows, as Conn.QueryRow returns.
type firstRow struct{ rows pgx.Rows }

func (r firstRow) Scan(dest ...any) error {
	defer r.rows.Close()
	if err := r.rows.Err(); err != nil {
		return err
	}
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}
