package idem

import (
	"context"
	"database/sql"
)

// SQLExecer is what ExecFenced writes with: a *sql.DB, *sql.Tx or
// *sql.Conn.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// ExecFenced runs a fenced write in another database from inside Do's
// effect: query must compare a guard column of the rows it changes with
// the claim's fencing token, which ExecFenced appends as the last
// argument, and store the token there, for example
//
//	UPDATE accounts SET balance = balance - $2, fence = $3 WHERE id = $1 AND fence < $3
//
// (the guard column starts at 0). Tokens of a store only grow, so a holder
// whose claim was recovered and taken over, and whose write arrives late
// (a paused process, a delayed network path), finds a newer token in the
// row and changes nothing: ExecFenced then returns an error wrapping
// ErrFenced. It reports the same when the rows do not exist, which the
// statement cannot tell apart; create them first. For an INSERT, guard it
// the same way (INSERT ... ON CONFLICT (id) DO UPDATE SET ... WHERE
// t.fence < EXCLUDED.fence).
//
// A fenced write is what closes the window Options.RecoveryGrace only
// narrows for effects outside the store's database; for effects inside
// pgstore's database, idem.DoTx commits the effect with its record.
func ExecFenced(ctx context.Context, db SQLExecer, query string, args ...any) (sql.Result, error) {
	c, ok := ClaimFromContext(ctx)
	if !ok {
		return nil, ErrNoClaim
	}
	res, err := db.ExecContext(ctx, query, append(args, int64(c.Token()))...)
	if err != nil {
		return nil, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return res, err
	}
	if n == 0 {
		return res, &FencedError{Scope: c.Scope(), Key: c.Key(), Token: c.Token()}
	}
	return res, nil
}
