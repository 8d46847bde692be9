package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// idemPostgresContender returns idem on its PostgreSQL backend (pgstore)
// when a server is available.
func idemPostgresContender(srv *Servers) Contender {
	c := Contender{
		Name: "idem-pg", Kind: "idem", Durable: true,
		Config: "idem.New over pgstore.New (github.com/idemkit/idem/pgstore) on a pgxpool of 40 connections; " +
			"PostgreSQL with its default durability (synchronous_commit=on: every commit flushed to the WAL)",
	}
	if srv.PGURL == "" {
		c.Skip = srv.PGNote
		return c
	}
	c.Open = func(ctx context.Context, ns string) (Store, error) {
		table := tableFor("i", ns)
		st, err := newIdemStore(func(load bool) (*idem.Store, func() error, error) {
			pool, err := newPool(ctx, srv.PGURL, 40, load)
			if err != nil {
				return nil, nil, err
			}
			b, err := pgstore.New(ctx, pool, &pgstore.Options{Schema: srv.PGSchema, Table: table})
			if err != nil {
				pool.Close()
				return nil, nil, err
			}
			o := idemOptions(idem.Durable, benchResult)
			// The claims the recovery workload abandons stand for a dead
			// instance's: the sweep is measured, not the grace a live
			// instance's claims get (Options.RecoveryGrace).
			o.RecoveryGrace = -1
			s := idem.New(b, o)
			return s, func() error { err := s.Close(); pool.Close(); return err }, nil
		}, time.Millisecond)
		if err != nil {
			return nil, err
		}
		return &idemPGStore{idemStore: st, url: srv.PGURL, schema: srv.PGSchema, table: table}, nil
	}
	return c
}

// idemPGStore is idem on PostgreSQL: the server holds its memory and disk.
type idemPGStore struct {
	*idemStore
	url, schema, table string
}

// Footprint implements Footprinter: the sizes of the records table and
// of the counts table beside it, with their indexes and TOAST; the
// server's memory is not counted.
func (s *idemPGStore) Footprint(ctx context.Context) (int64, int64, string, error) {
	n, err := pgTableBytes(ctx, s.url, pgx.Identifier{s.schema, s.table}.Sanitize())
	if err != nil {
		return -1, 0, "", err
	}
	c, err := pgTableBytes(ctx, s.url, pgx.Identifier{s.schema, s.table + "_counts"}.Sanitize())
	return -1, n + c, "disk: pg_total_relation_size of the records and counts tables (indexes, TOAST; WAL not counted); " +
		"memory: the server's, not measured", err
}

// ledger is the quoted, qualified name of the transactional-effect
// workload's ledger table, beside the records.
func (s *idemPGStore) ledger() string {
	return pgx.Identifier{s.schema, s.table + "_ledger"}.Sanitize()
}

// TxEffect implements TxEffecter: it creates the ledger table and returns
// the cycle of mode on the i-th fresh key.
func (s *idemPGStore) TxEffect(ctx context.Context, mode string, seed uint64) (func(context.Context, int) error, error) {
	st := s.store()
	pool := st.Backend().(*pgstore.Backend).Pool()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.ledger()+` (key text NOT NULL, amount bigint NOT NULL)`); err != nil {
		return nil, err
	}
	insert := `INSERT INTO ` + s.ledger() + ` (key, amount) VALUES ($1, 4200)`
	res := idem.Result{Status: 200, Body: benchResult}
	check := func(k string, replayed bool, err error) error {
		if err == nil && replayed {
			err = fmt.Errorf("fresh key %q replayed", k)
		}
		return err
	}
	switch mode {
	case txDoTx:
		return func(ctx context.Context, i int) error {
			k := keyOf(seed, i)
			_, replayed, err := idem.DoTx(ctx, st, idem.Request{Key: k, Fingerprint: benchFP},
				func(ctx context.Context, tx pgx.Tx) (idem.Result, error) {
					_, err := tx.Exec(ctx, insert, k)
					return res, err
				})
			return check(k, replayed, err)
		}, nil
	case txDoInsert:
		return func(ctx context.Context, i int) error {
			k := keyOf(seed, i)
			_, replayed, err := st.Do(ctx, idem.Request{Key: k, Fingerprint: benchFP},
				func(ctx context.Context) (idem.Result, error) {
					_, err := pool.Exec(ctx, insert, k)
					return res, err
				})
			return check(k, replayed, err)
		}, nil
	}
	return nil, fmt.Errorf("unknown transactional-effect mode %q", mode)
}

// FreshReplays implements FreshReplayer: each pass over the keys gets a
// Store of its own on the same table (a new pgstore.Backend on the same
// pool), so that no Begin finds its key in the Store's replay cache.
func (s *idemPGStore) FreshReplays(ctx context.Context) (begin func(ctx context.Context, pass int, key, fp string) (Attempt, error), done func() error) {
	pool := s.store().Backend().(*pgstore.Backend).Pool()
	return freshReplays(func() (*idem.Store, error) {
		b, err := pgstore.New(ctx, pool, &pgstore.Options{Schema: s.schema, Table: s.table})
		if err != nil {
			return nil, err
		}
		o := idemOptions(idem.Durable, benchResult)
		o.RecoveryGrace = -1
		return idem.New(b, o), nil
	})
}

// freshReplays returns a FreshReplayer's functions over the Stores open
// returns, one per pass.
func freshReplays(open func() (*idem.Store, error)) (begin func(ctx context.Context, pass int, key, fp string) (Attempt, error), done func() error) {
	var mu sync.Mutex
	stores := map[int]*idem.Store{}
	get := func(pass int) (*idem.Store, error) {
		mu.Lock()
		defer mu.Unlock()
		if st := stores[pass]; st != nil {
			return st, nil
		}
		st, err := open()
		if err != nil {
			return nil, err
		}
		stores[pass] = st
		return st, nil
	}
	begin = func(ctx context.Context, pass int, key, fp string) (Attempt, error) {
		st, err := get(pass)
		if err != nil {
			return Attempt{}, err
		}
		return beginOn(ctx, st, key, fp)
	}
	done = func() error {
		mu.Lock()
		defer mu.Unlock()
		var first error
		for _, st := range stores {
			if err := st.Close(); first == nil {
				first = err
			}
		}
		return first
	}
	return begin, done
}

// tableFor names the table of a namespace: a letter for the contender,
// then a digest of the namespace (a directory path).
func tableFor(kind, ns string) string {
	sum := sha256.Sum256([]byte(ns))
	return kind + "_" + hex.EncodeToString(sum[:8])
}

// newPool opens a pool of up to maxConns connections. With loading set,
// its sessions run with synchronous_commit off: commits do not wait for
// the WAL flush, which only the untimed loads of the retained-keys
// workload use.
func newPool(ctx context.Context, url string, maxConns int32, loading bool) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	if loading {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// Drop implements Dropper: it drops the records table, what pgstore
// creates beside it (its documented names: Table_token, Table_counts,
// Table_version) and the ledger of the transactional-effect workload.
func (s *idemPGStore) Drop(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	q := func(name string) string { return pgx.Identifier{s.schema, name}.Sanitize() }
	_, err = conn.Exec(ctx, `DROP TABLE IF EXISTS `+q(s.table)+`, `+q(s.table+"_counts")+`, `+q(s.table+"_version")+`, `+s.ledger()+`;
DROP SEQUENCE IF EXISTS `+q(s.table+"_token"))
	return err
}
