package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgxContender returns the hand-written PostgreSQL store a user would
// write with pgx, when a server is available.
func pgxContender(srv *Servers) Contender {
	c := Contender{
		Name: "pgx", Kind: "peer", Durable: true,
		Config: "github.com/jackc/pgx/v5 pgxpool (40 connections) on PostgreSQL with its default durability " +
			"(synchronous_commit=on); table (key text PRIMARY KEY, state, fp, lease_ends, expires_at, result bytea); " +
			"Begin reads first, then claims an absent key with INSERT ... ON CONFLICT (key) DO NOTHING, " +
			"Complete is an UPDATE; each statement its own transaction",
	}
	if srv.PGURL == "" {
		c.Skip = srv.PGNote
		return c
	}
	c.Open = func(ctx context.Context, ns string) (Store, error) {
		return openPgx(ctx, srv.PGURL, pgx.Identifier{srv.PGSchema, tableFor("p", ns)})
	}
	return c
}

// pgxWritesContender returns the bare pgx peer that claims with its write
// alone: the claim+complete cycle is exactly two durable statements, an
// INSERT and an UPDATE, the floor pgstore's cycle is judged against.
func pgxWritesContender(srv *Servers) Contender {
	c := Contender{
		Name: pgxWrites, Kind: "peer", Durable: true,
		Config: "as pgx, but Begin claims first: INSERT ... ON CONFLICT (key) DO NOTHING RETURNING, and reads " +
			"the row only when the key exists; a cycle on a fresh key is two statements, two durable writes",
	}
	if srv.PGURL == "" {
		c.Skip = srv.PGNote
		return c
	}
	c.Open = func(ctx context.Context, ns string) (Store, error) {
		s, err := openPgx(ctx, srv.PGURL, pgx.Identifier{srv.PGSchema, tableFor("w", ns)})
		if s != nil {
			s.writeFirst = true
		}
		return s, err
	}
	return c
}

// pgxWrites names the contender of pgxWritesContender.
const pgxWrites = "pgx-2w"

// pgxStore is the raw pgx peer.
type pgxStore struct {
	// writeFirst makes Begin try the INSERT before the SELECT.
	writeFirst bool
	pool       *pgxpool.Pool
	url        string
	ident      pgx.Identifier
	table      string // quoted and qualified
}

func openPgx(ctx context.Context, url string, ident pgx.Identifier) (*pgxStore, error) {
	pool, err := newPool(ctx, url, 40, false)
	if err != nil {
		return nil, err
	}
	s := &pgxStore{pool: pool, url: url, ident: ident, table: ident.Sanitize()}
	_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.table+` (
	key        text PRIMARY KEY,
	state      smallint NOT NULL,
	fp         text NOT NULL,
	lease_ends bigint NOT NULL,
	expires_at bigint NOT NULL,
	result     bytea
)`)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Begin implements Claimer.
func (s *pgxStore) Begin(ctx context.Context, key, fp string) (Attempt, error) {
	if s.writeFirst {
		var state int16
		err := s.pool.QueryRow(ctx, `INSERT INTO `+s.table+` (key, state, fp, lease_ends, expires_at)
VALUES ($1, 1, $2, $3, 0) ON CONFLICT (key) DO NOTHING RETURNING state`, key, fp, time.Now().Add(lease).UnixNano()).Scan(&state)
		switch {
		case err == nil:
			return Attempt{Outcome: Claimed}, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return Attempt{}, err
		}
	}
	for range 2 {
		var r record
		err := s.pool.QueryRow(ctx, `SELECT state, fp, result FROM `+s.table+` WHERE key = $1`, key).Scan(&r.State, &r.FP, &r.Result)
		switch {
		case err == nil:
			return attemptOf(r, fp)
		case !errors.Is(err, pgx.ErrNoRows):
			return Attempt{}, err
		}
		tag, err := s.pool.Exec(ctx, `INSERT INTO `+s.table+` (key, state, fp, lease_ends, expires_at)
VALUES ($1, 1, $2, $3, 0) ON CONFLICT (key) DO NOTHING`, key, fp, time.Now().Add(lease).UnixNano())
		if err != nil {
			return Attempt{}, err
		}
		if tag.RowsAffected() == 1 {
			return Attempt{Outcome: Claimed}, nil
		}
	}
	return Attempt{}, fmt.Errorf("pgx: key %q neither claimed nor found", key)
}

// Complete implements Claimer.
func (s *pgxStore) Complete(ctx context.Context, key string, a Attempt, result []byte) error {
	tag, err := s.pool.Exec(ctx, `UPDATE `+s.table+` SET state = 2, result = $1, expires_at = $2 WHERE key = $3 AND state = 1`,
		result, time.Now().Add(retention).UnixNano(), key)
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("pgx: complete of %q changed %d rows", key, tag.RowsAffected())
	}
	return err
}

// copyAll writes one row per key with COPY, then refreshes the planner's
// statistics.
func (s *pgxStore) copyAll(ctx context.Context, keys []string, r record) error {
	rows := make([][]any, len(keys))
	for i, k := range keys {
		rows[i] = []any{k, int16(r.State), r.FP, r.LeaseEnds, r.ExpiresAt, r.Result}
	}
	_, err := s.pool.CopyFrom(ctx, s.ident, []string{"key", "state", "fp", "lease_ends", "expires_at", "result"},
		pgx.CopyFromRows(rows))
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `ANALYZE `+s.table)
	return err
}

// Fill implements Dataset.
func (s *pgxStore) Fill(ctx context.Context, keys []string, result []byte) error {
	return s.copyAll(ctx, keys, doneRecord(benchFP, result, time.Now()))
}

// Abandon implements Dataset: the claims' leases have just ended.
func (s *pgxStore) Abandon(ctx context.Context, keys []string) error {
	return s.copyAll(ctx, keys, record{State: stateInProgress, FP: benchFP, LeaseEnds: time.Now().UnixNano()})
}

// Sweep implements Dataset: select the claims whose lease ended, then
// complete them in one statement. Without Index the SELECT scans the
// table.
func (s *pgxStore) Sweep(ctx context.Context, result []byte) (int, error) {
	now := time.Now()
	rows, err := s.pool.Query(ctx, `SELECT key FROM `+s.table+` WHERE state = 1 AND lease_ends < $1`, now.UnixNano())
	if err != nil {
		return 0, err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(keys) == 0 {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE `+s.table+` SET state = 2, result = $1, expires_at = $2 WHERE key = ANY($3) AND state = 1`,
		result, now.Add(retention).UnixNano(), keys)
	return int(tag.RowsAffected()), err
}

// Index implements Indexer: a partial index over the open claims' lease
// ends.
func (s *pgxStore) Index(ctx context.Context) error {
	name := pgx.Identifier{s.ident[len(s.ident)-1] + "_stale"}.Sanitize()
	if _, err := s.pool.Exec(ctx, `CREATE INDEX IF NOT EXISTS `+name+` ON `+s.table+` (lease_ends) WHERE state = 1`); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `ANALYZE `+s.table)
	return err
}

// Footprint implements Footprinter.
func (s *pgxStore) Footprint(ctx context.Context) (int64, int64, string, error) {
	n, err := pgTableBytes(ctx, s.url, s.table)
	return -1, n, "disk: pg_total_relation_size (table, indexes, TOAST; WAL not counted); memory: the server's, not measured", err
}

// Drop implements Dropper.
func (s *pgxStore) Drop(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `DROP TABLE IF EXISTS `+s.table)
	return err
}

// Close implements Store.
func (s *pgxStore) Close() error {
	s.pool.Close()
	return nil
}

// pgTableBytes returns the size of a table with its indexes and TOAST.
func pgTableBytes(ctx context.Context, url, table string) (int64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass)`, table).Scan(&n)
	return n, err
}
