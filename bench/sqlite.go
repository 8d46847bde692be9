package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go
)

// sqliteContenders returns SQLite (modernc.org/sqlite) in WAL mode with
// synchronous=FULL (durable: the WAL is synced at every commit) and
// synchronous=NORMAL (the WAL is synced only at checkpoints: survives a
// process crash, not a power loss).
func sqliteContenders() []Contender {
	desc := func(sync string) string {
		return "modernc.org/sqlite v1.62.0, journal_mode=WAL, synchronous=" + sync + ", busy_timeout=10s; " +
			"table (key TEXT PRIMARY KEY, state, fp, lease_ends, expires_at, result BLOB); one writer connection " +
			"(SQLite has one writer) and a pool of readers; Begin reads first, then claims an absent key with " +
			"INSERT ... ON CONFLICT(key) DO NOTHING (the primary key is the lock), Complete is an UPDATE; " +
			"each statement its own transaction"
	}
	return []Contender{
		{Name: "sqlite-full", Kind: "peer", Durable: true, Portable: true, Config: desc("FULL"),
			Open: func(ctx context.Context, dir string) (Store, error) { return openSQLite(ctx, dir, "FULL") }},
		{Name: "sqlite-normal", Kind: "peer", Durable: false, Portable: true, SameData: "sqlite-full", Config: desc("NORMAL"),
			Open: func(ctx context.Context, dir string) (Store, error) { return openSQLite(ctx, dir, "NORMAL") }},
	}
}

// sqliteStore is the SQLite peer.
type sqliteStore struct {
	w, r                      *sql.DB // one writer connection; readers
	get, claim, complete, put *sql.Stmt
}

const sqliteSchema = `CREATE TABLE IF NOT EXISTS idem (
	key        TEXT PRIMARY KEY,
	state      INTEGER NOT NULL,
	fp         TEXT NOT NULL,
	lease_ends INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	result     BLOB
)`

func openSQLite(ctx context.Context, dir, sync string) (*sqliteStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	dsn := "file:" + filepath.Join(dir, "idem.db") +
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(" + sync + ")&_pragma=busy_timeout(10000)&_txlock=immediate"
	w, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	r, err := sql.Open("sqlite", dsn)
	if err != nil {
		w.Close()
		return nil, err
	}
	n := 2 * runtime.GOMAXPROCS(0)
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	s := &sqliteStore{w: w, r: r}
	if _, err := w.ExecContext(ctx, sqliteSchema); err != nil {
		s.Close()
		return nil, err
	}
	for _, p := range []struct {
		db   *sql.DB
		stmt **sql.Stmt
		q    string
	}{
		{r, &s.get, `SELECT state, fp, result FROM idem WHERE key = ?`},
		{w, &s.claim, `INSERT INTO idem (key, state, fp, lease_ends, expires_at) VALUES (?, 1, ?, ?, 0) ON CONFLICT(key) DO NOTHING`},
		{w, &s.complete, `UPDATE idem SET state = 2, result = ?, expires_at = ? WHERE key = ? AND state = 1`},
		{w, &s.put, `INSERT INTO idem (key, state, fp, lease_ends, expires_at, result) VALUES (?, ?, ?, ?, ?, ?)`},
	} {
		if *p.stmt, err = p.db.PrepareContext(ctx, p.q); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// read returns the stored record of key, or ok false.
func (s *sqliteStore) read(ctx context.Context, key string) (r record, ok bool, err error) {
	err = s.get.QueryRowContext(ctx, key).Scan(&r.State, &r.FP, &r.Result)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

// Begin implements Claimer.
func (s *sqliteStore) Begin(ctx context.Context, key, fp string) (Attempt, error) {
	for range 2 {
		r, ok, err := s.read(ctx, key)
		if err != nil {
			return Attempt{}, err
		}
		if ok {
			return attemptOf(r, fp)
		}
		res, err := s.claim.ExecContext(ctx, key, fp, time.Now().Add(lease).UnixNano())
		if err != nil {
			return Attempt{}, err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return Attempt{Outcome: Claimed}, nil
		}
		// Another caller claimed it between the read and the insert.
	}
	return Attempt{}, fmt.Errorf("sqlite: key %q neither claimed nor found", key)
}

// Complete implements Claimer.
func (s *sqliteStore) Complete(ctx context.Context, key string, a Attempt, result []byte) error {
	res, err := s.complete.ExecContext(ctx, result, time.Now().Add(retention).UnixNano(), key)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("sqlite: complete of %q changed %d rows", key, n)
	}
	return nil
}

// insertAll writes one record per key in transactions of 10,000 rows.
func (s *sqliteStore) insertAll(ctx context.Context, keys []string, rec func() record) error {
	for len(keys) > 0 {
		n := min(len(keys), 10000)
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		put := tx.StmtContext(ctx, s.put)
		for _, k := range keys[:n] {
			r := rec()
			if _, err := put.ExecContext(ctx, k, r.State, r.FP, r.LeaseEnds, r.ExpiresAt, r.Result); err != nil {
				tx.Rollback()
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

// Fill implements Dataset.
func (s *sqliteStore) Fill(ctx context.Context, keys []string, result []byte) error {
	now := time.Now()
	return s.insertAll(ctx, keys, func() record { return doneRecord(benchFP, result, now) })
}

// Abandon implements Dataset: the claims' leases have just ended.
func (s *sqliteStore) Abandon(ctx context.Context, keys []string) error {
	now := time.Now().UnixNano()
	return s.insertAll(ctx, keys, func() record { return record{State: stateInProgress, FP: benchFP, LeaseEnds: now} })
}

// Sweep implements Dataset: it selects the claims whose lease ended and
// completes them in one transaction. Without Index the SELECT scans the
// table.
func (s *sqliteStore) Sweep(ctx context.Context, result []byte) (int, error) {
	now := time.Now()
	rows, err := s.r.QueryContext(ctx, `SELECT key FROM idem WHERE state = 1 AND lease_ends < ?`, now.UnixNano())
	if err != nil {
		return 0, err
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return 0, err
		}
		keys = append(keys, k)
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	complete := tx.StmtContext(ctx, s.complete)
	for _, k := range keys {
		if _, err := complete.ExecContext(ctx, result, now.Add(retention).UnixNano(), k); err != nil {
			tx.Rollback()
			return 0, err
		}
	}
	return len(keys), tx.Commit()
}

// Index implements Indexer: a partial index over the open claims' lease
// ends, which the stale-claim query uses.
func (s *sqliteStore) Index(ctx context.Context) error {
	_, err := s.w.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS idem_stale ON idem (lease_ends) WHERE state = 1`)
	return err
}

// Close implements Store.
func (s *sqliteStore) Close() error {
	for _, st := range []*sql.Stmt{s.get, s.claim, s.complete, s.put} {
		if st != nil {
			st.Close()
		}
	}
	s.r.Close()
	return s.w.Close()
}
