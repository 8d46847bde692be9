package main

import (
	"context"
	"fmt"
	"time"
)

// txEffectGoroutines returns the concurrencies of the transactional-effect
// workload.
func txEffectGoroutines() []int { return []int{1, 32} }

// The transactional-effect workload's two ways of running one effect, named
// as its contenders.
const (
	txDoTx     = "idem-pg DoTx"
	txDoInsert = "idem-pg Do+INSERT"
)

// TxEffecter is implemented by idem on PostgreSQL: a first request whose
// effect is one INSERT into a ledger table in the records' database, run
// the two ways a user can.
type TxEffecter interface {
	// TxEffect returns the cycle of key i in mode (txDoTx or txDoInsert).
	TxEffect(ctx context.Context, mode string, seed uint64) (func(ctx context.Context, i int) error, error)
}

// txEffects measures pgstore.DoTx (the claim; the INSERT and the completion
// in one transaction) against Store.Do with the INSERT committed on its own
// between the claim and the completion (three transactions), on fresh keys.
// Each repetition opens a fresh store and ledger; the two modes alternate.
func (s *Suite) txEffects(ctx context.Context) error {
	for _, g := range txEffectGoroutines() {
		s.addWorkload(Workload{ID: fmt.Sprintf("txeffect-%d", g),
			Title: fmt.Sprintf("Transactional effect on PostgreSQL, %d goroutine(s)", g),
			About: "one cycle = a first request whose effect is one INSERT into a ledger table in the records' " +
				"database: " + txDoTx + " runs it with pgstore.DoTx (the claim, then the INSERT and the completion " +
				"in one transaction: BEGIN sent with the INSERT, COMMIT with the completion); " + txDoInsert +
				" runs it with Store.Do and the INSERT as a statement of its own (the claim, the INSERT, the " +
				"completion: three transactions). Only idem on PostgreSQL runs it",
			Unit: "cycles/s", Higher: true, Reference: txDoInsert})
	}
	for rep := range s.plan.Reps {
		for _, g := range txEffectGoroutines() {
			id := fmt.Sprintf("txeffect-%d", g)
			for _, c := range s.contenders {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if c.Name != "idem-pg" {
					continue
				}
				for _, mode := range []string{txDoTx, txDoInsert} {
					if s.skip(Contender{Name: mode, Skip: c.Skip}, id) {
						continue
					}
					var rate float64
					start := time.Now()
					err := s.withStore(ctx, c, func(st Store) error {
						te, ok := st.(TxEffecter)
						if !ok {
							return naError("no transactional effects")
						}
						op, err := te.TxEffect(ctx, mode, newSeed())
						if err != nil {
							return err
						}
						s.quiesce(ctx)
						rate, err = run(ctx, g, s.plan.Warm, s.plan.Duration, s.plan.MaxOps, op)
						return err
					})
					s.add(id, mode, rate, nil, err)
					s.logf("  rep %d %-11s %-18s %10.0f cycles/s (%.2fs)", rep+1, id, mode, rate, time.Since(start).Seconds())
				}
			}
		}
	}
	return ctx.Err()
}
