package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// zero is the stored form of the zero time.Time: the smallest int64, so
// that it sorts before every real time and compares as long past.
const zero = "(-9223372036854775807 - 1)"

// A migration moves the schema from version-1 to version. Migrations are
// never edited once released: a change is a new migration.
type migration struct {
	version     int
	description string
	sql         string // with {table}, {seq}, {stale}, {expiry}, {counts} and {zero}
}

// migrations returns every migration in order.
func migrations() []migration {
	return []migration{{
		version:     1,
		description: "records table, token sequence, stale and expiry indexes",
		sql: `
CREATE SEQUENCE {seq} AS bigint NO CYCLE;
CREATE TABLE {table} (
	scope       text COLLATE "C" NOT NULL,
	key         text COLLATE "C" NOT NULL,
	format      smallint NOT NULL,
	state       smallint NOT NULL,
	fingerprint bytea    NOT NULL,
	token       bigint   NOT NULL,
	lease_ends  bigint   NOT NULL,
	expires_at  bigint   NOT NULL,
	retention   bigint   NOT NULL,
	result      bytea,
	first_seen  bigint   NOT NULL,
	claimed_at  bigint   NOT NULL,
	done_at     bigint   NOT NULL,
	claims      integer  NOT NULL,
	checks      integer  NOT NULL,
	next_check  bigint   NOT NULL,
	attention   boolean  NOT NULL,
	recovered   text     NOT NULL,
	owner       text     NOT NULL,
	sweeper     text     NOT NULL,
	sweep_until bigint   NOT NULL,
	PRIMARY KEY (scope, key)
);
COMMENT ON TABLE {table} IS 'idem records: one row per (scope, key). Times are Unix nanoseconds of the store''s clock; the smallest bigint is the zero time. state: 1 in progress, 2 done, 3 released.';
-- Stale: the open claims by lease end. Claims needing attention wait for an
-- operator and stay out of the sweep's way.
CREATE INDEX {stale} ON {table} (lease_ends, next_check) WHERE state = 1 AND NOT attention;
-- Reclaim: done and released records by expiry.
CREATE INDEX {expiry} ON {table} (expires_at) WHERE state <> 1;
`,
	}, {
		version:     2,
		description: "the record's story: attempts, replay and rejection counts",
		// The defaults let rows written before, and instances of the
		// previous release still running, go on: a row of version 1 has an
		// empty story and no counts. Constant defaults need no rewrite of
		// the table. IF NOT EXISTS keeps the migration harmless where an
		// operator added the columns ahead of it.
		sql: `
ALTER TABLE {table}
	ADD COLUMN IF NOT EXISTS attempts       jsonb  NOT NULL DEFAULT '[]',
	ADD COLUMN IF NOT EXISTS replays        bigint NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS last_replay    bigint NOT NULL DEFAULT {zero},
	ADD COLUMN IF NOT EXISTS conflicts      bigint NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS mismatches     bigint NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS last_rejection bigint NOT NULL DEFAULT {zero};
COMMENT ON COLUMN {table}.attempts IS 'the claims of the record''s life, oldest first, bounded (the first and the latest are kept): [{"t": token, "c": claimed at, "o": owner, "e": ended at, "x": outcome, "r": reason or note, "s": status}]; times as the other columns';
`,
	}, {
		version:     3,
		description: "the may-have-run-twice mark of late completions",
		// As migration 2: a constant default, no rewrite, and instances of
		// the previous release go on (they neither read nor clear it).
		sql: `
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS twice boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN {table}.twice IS 'idem Record.MayHaveRunTwice: a holder whose claim had been recovered finished its effect after the key was claimed again';
`,
	}, {
		version:     4,
		description: "replay and rejection counts in a narrow table of their own",
		// Counting a replay no longer rewrites the record's row (see
		// tally.go). The counts already in the records' columns stay
		// there: reads add both, so the migration moves nothing and
		// instances of the previous release still running go on (their
		// counts land in the records' columns, which reads still add).
		// The fill factor leaves room on each page for the new version of
		// an updated row, so that a flush's updates stay heap-only.
		sql: `
CREATE TABLE IF NOT EXISTS {counts} (
	scope          text COLLATE "C" NOT NULL,
	key            text COLLATE "C" NOT NULL,
	life           bigint NOT NULL,
	replays        bigint NOT NULL,
	conflicts      bigint NOT NULL,
	mismatches     bigint NOT NULL,
	last_replay    bigint NOT NULL,
	last_rejection bigint NOT NULL,
	PRIMARY KEY (scope, key)
) WITH (fillfactor = 70);
COMMENT ON TABLE {counts} IS 'idem replay and rejection counts of the records table beside it, added to the counts in the record''s own columns when a record is read. life is the first_seen of the record''s life the counts belong to: a row whose life is not its record''s first_seen is an earlier life''s and counts for nothing.';
`,
	}}
}

// migrate resolves the schema, then brings the tables to the latest
// version (or to version upTo, when it is not 0: for tests) in one
// transaction under an advisory lock, and returns their names.
func (b *Backend) migrate(ctx context.Context, schema, table string, upTo int) (names, error) {
	var n names
	// READ COMMITTED whatever the server's default: once the lock is
	// granted, the next statement must see what the holder committed.
	tx, err := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return n, b.fail(ctx, "migrate", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	if schema == "" {
		var cur *string
		if err := tx.QueryRow(ctx, "SELECT current_schema()").Scan(&cur); err != nil {
			return n, b.fail(ctx, "migrate", err)
		}
		if cur == nil {
			return n, errors.New("pgstore: the pool's search_path names no existing schema; set Options.Schema")
		}
		schema = *cur
	}
	n = newNames(schema, table)

	// Every instance that starts takes the lock, so a second one waits for
	// the first one's migration and then finds the schema current. The lock
	// is released when the transaction ends, however it ends.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", n.lockKey); err != nil {
		return n, b.fail(ctx, "migrate", err)
	}
	var hasSchema, hasVersion bool
	err = tx.QueryRow(ctx,
		"SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1), to_regclass($2) IS NOT NULL",
		schema, n.version).Scan(&hasSchema, &hasVersion)
	if err != nil {
		return n, b.fail(ctx, "migrate", err)
	}
	if !hasSchema {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
			return n, fmt.Errorf("pgstore: create schema %q: %w", schema, b.fail(ctx, "migrate", err))
		}
	}
	current := 0
	if hasVersion {
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+n.version).Scan(&current); err != nil {
			return n, b.fail(ctx, "migrate", err)
		}
	}
	all := migrations()
	if upTo > 0 {
		all = all[:upTo]
	}
	latest := all[len(all)-1].version
	if current > latest {
		return n, fmt.Errorf("%w: %s is at version %d, this release knows up to %d", ErrSchemaVersion, n.table, current, latest)
	}
	if current == latest {
		// Nothing to do: end without writing, so a role that may not
		// create objects can still start.
		return n, nil
	}
	if !hasVersion {
		_, err := tx.Exec(ctx, `CREATE TABLE `+n.version+` (
	version     integer PRIMARY KEY,
	description text NOT NULL,
	applied_at  timestamptz NOT NULL DEFAULT now()
)`)
		if err != nil {
			return n, fmt.Errorf("pgstore: create %s: %w", n.version, b.fail(ctx, "migrate", err))
		}
	}
	r := strings.NewReplacer("{table}", n.table, "{seq}", n.seq, "{stale}", n.stale, "{expiry}", n.expiry,
		"{counts}", n.counts, "{zero}", zero)
	for _, m := range all {
		if m.version <= current {
			continue
		}
		if _, err := tx.Exec(ctx, r.Replace(m.sql)); err != nil {
			return n, fmt.Errorf("pgstore: migration %d of %s: %w", m.version, n.table, b.fail(ctx, "migrate", err))
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+n.version+" (version, description) VALUES ($1, $2)",
			m.version, m.description); err != nil {
			return n, b.fail(ctx, "migrate", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return n, b.fail(ctx, "migrate", err)
	}
	return n, nil
}
