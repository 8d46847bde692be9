package idem

import (
	"context"
	"fmt"
	"reflect"

	"github.com/idemkit/idem/backend"
)

// DoTx is Do for an effect whose writes live in the store's own database:
// fn writes with tx, a transaction of the backend's (a pgx.Tx on pgstore),
// and when the error policy saves the outcome the record's completion is
// written in that transaction, fenced by the claim's token, and the two
// commit together. So the effect committed exactly when its record is
// done: a holder that was paused while its claim went stale and was
// recovered finds the token changed, its transaction rolls back, and DoTx
// returns an error wrapping ErrFenced; fn's writes never happened.
// Recovery needs no Resolver for such claims: a stale one is released as
// "transactional effect not committed".
//
// When the policy releases or holds the claim, or fn panics, the
// transaction rolls back first; after a panic the claim is released, with
// or without a Resolver (the effect did not commit), and the panic is
// re-raised. fn must not commit or roll back tx itself.
//
// DoTx returns an error wrapping ErrNoTx when the store's backend does not
// run effects in transactions of type Tx (it is not a
// backend.TxBackend[Tx]).
func DoTx[Tx any](ctx context.Context, s *Store, req Request, fn func(ctx context.Context, tx Tx) (Result, error)) (res Result, replayed bool, err error) {
	tb, ok := s.b.(backend.TxBackend[Tx])
	if !ok {
		return Result{}, false, fmt.Errorf("%w: %T does not run effects in a %v", ErrNoTx, s.b, reflect.TypeFor[Tx]())
	}
	ctx, e := tb.BeginTx(ctx, req.Scope, req.Key)
	// A safety net: do ends the transaction on every path it reaches fn
	// by; this returns its resources if a path does not.
	defer e.Rollback(context.WithoutCancel(ctx))
	run := func(ctx context.Context) (Result, error) {
		ctx, tx, err := e.Open(ctx)
		if err != nil {
			return Result{}, err
		}
		return fn(ctx, tx)
	}
	return s.do(ctx, req, run, e)
}
