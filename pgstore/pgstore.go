package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults for zero Options fields.
const (
	DefaultTable            = "idem_records"
	DefaultStatementTimeout = 10 * time.Second
	DefaultHandOut          = 30 * time.Second
)

// MaxTableLen is the longest table name accepted, in bytes: PostgreSQL
// truncates identifiers at 63 bytes, and the names of the sequence, indexes
// and version table add a suffix of up to 8 bytes to it.
const MaxTableLen = 55

// Options configure a Backend. Nil Options, and every zero field, mean the
// documented default.
type Options struct {
	// Schema is the PostgreSQL schema that holds the tables. Empty means
	// the pool's current schema (the first existing schema of its
	// search_path), resolved once in New. A named schema is created if it
	// does not exist.
	Schema string

	// Table is the name of the records table. Beside it New creates the
	// sequence Table_token, the indexes Table_stale and Table_expiry, the
	// table of replay and rejection counts Table_counts and the migration
	// table Table_version. At most MaxTableLen bytes. Default
	// "idem_records". Two stores are separate when their tables are.
	Table string

	// StatementTimeout bounds each call's time in the database, acquiring
	// a connection included. A call that runs out of it fails with an error
	// wrapping backend.ErrUnavailable and context.DeadlineExceeded, so a hung
	// server makes requests fail rather than wait. Default 10 seconds;
	// negative means no bound beyond the caller's context.
	StatementTimeout time.Duration

	// HandOut is how long, in store time, a stale claim that Stale returned
	// to this Backend is withheld from the Stale calls of other Backends on
	// the same table, so that instances sweeping at once do not resolve the
	// same claim. It bounds how long a sweep that crashed delays another
	// instance's. A fenced write on the claim ends the hand-out early.
	// Default 30 seconds.
	HandOut time.Duration

	// FailoverSafe makes New refuse a server whose commits can be
	// acknowledged before a standby has them, with an error wrapping
	// ErrNotFailoverSafe that names the setting: it asks for a non-empty
	// synchronous_standby_names and synchronous_commit on or remote_apply
	// in the pool's sessions, so that a result the Store acknowledged
	// survives the promotion of a standby (docs/pgstore.md, "Failover").
	// Default false: New opens on any primary, and an asynchronous standby
	// promoted after the primary died may lack the latest acknowledged
	// results, whose effects then run again.
	FailoverSafe bool
}

// Backend is an backend.Backend storing records in a PostgreSQL table. It is
// safe for concurrent use, and any number of Backends in any number of
// processes may share one table.
type Backend struct {
	pool    *pgxpool.Pool
	table   string // the schema-qualified, quoted records table
	q       queries
	id      string // this instance's name in hand-outs
	timeout time.Duration
	handOut time.Duration
	closed  atomic.Bool
	mix     claimMix // Claim's choice of path (backend.go)
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Lister  = (*Backend)(nil)
)

// New returns a Backend on the caller's pool, after creating or upgrading
// its tables: the schema is versioned in a small table beside the records,
// and upgrades run under a transaction-scoped advisory lock, so that any
// number of instances may start at once. When the schema is current New
// changes nothing and needs no privilege beyond reading and writing the
// tables. New returns an error wrapping ErrSchemaVersion when the tables
// were created by a newer release, and one wrapping backend.ErrUnavailable
// when the database cannot be reached.
//
// The pool stays the caller's: Close does not close it.
func New(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*Backend, error) {
	b, n, err := open(ctx, pool, opts, 0)
	if err != nil {
		return nil, err
	}
	b.q = newQueries(n)
	return b, nil
}

// open checks opts and returns a Backend without its statements, after
// migrating its tables to version upTo (0: the latest). Only tests pass
// an older version (export_test.go).
func open(ctx context.Context, pool *pgxpool.Pool, opts *Options, upTo int) (*Backend, names, error) {
	if pool == nil {
		return nil, names{}, errors.New("pgstore: New with a nil pool")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if len(o.Table) > MaxTableLen {
		return nil, names{}, fmt.Errorf("pgstore: table name %q is longer than %d bytes", o.Table, MaxTableLen)
	}
	if o.StatementTimeout == 0 {
		o.StatementTimeout = DefaultStatementTimeout
	}
	if o.HandOut <= 0 {
		o.HandOut = DefaultHandOut
	}
	b := &Backend{pool: pool, timeout: o.StatementTimeout, handOut: o.HandOut}
	var id [8]byte
	_, _ = rand.Read(id[:])
	b.id = hex.EncodeToString(id[:])

	if o.FailoverSafe {
		if err := b.checkFailoverSafe(ctx); err != nil {
			return nil, names{}, err
		}
	}
	n, err := b.migrate(ctx, o.Schema, o.Table, upTo)
	if err != nil {
		return nil, n, err
	}
	b.table = n.table
	return b, n, nil
}

// checkFailoverSafe reads the settings that decide whether a commit waits
// for a synchronous standby, in one of the pool's sessions: role and
// database settings (ALTER ROLE ... SET) are in force there.
func (b *Backend) checkFailoverSafe(ctx context.Context) error {
	var names, commit string
	var standby bool
	err := b.run(ctx, "check failover safety", func(ctx context.Context) error {
		return b.pool.QueryRow(ctx, `SELECT current_setting('synchronous_standby_names'),
	current_setting('synchronous_commit'), pg_is_in_recovery()`).Scan(&names, &commit, &standby)
	})
	switch {
	case err != nil:
		return err
	case standby:
		return fmt.Errorf("%w: the server is a standby (in recovery); connect to the primary (target_session_attrs=read-write)", ErrNotFailoverSafe)
	case strings.TrimSpace(names) == "":
		return fmt.Errorf("%w: the server has synchronous_standby_names empty: commits are acknowledged before any standby has them; "+
			"name a synchronous standby, or open without FailoverSafe", ErrNotFailoverSafe)
	case commit != "on" && commit != "remote_apply":
		return fmt.Errorf("%w: the server has synchronous_commit %s, FailoverSafe needs on or remote_apply "+
			"(or open without FailoverSafe)", ErrNotFailoverSafe, commit)
	}
	return nil
}

// Table returns the schema-qualified, quoted name of the records table, for
// tools that read it directly.
func (b *Backend) Table() string { return b.table }

// Pool returns the pool the Backend was made with.
func (b *Backend) Pool() *pgxpool.Pool { return b.pool }

// Close ends the Backend: later calls fail with an error wrapping
// backend.ErrClosed. It does not close the pool, which stays the caller's, and
// always returns nil.
func (b *Backend) Close() error {
	b.closed.Store(true)
	return nil
}

// names are the quoted, schema-qualified identifiers of a store's objects.
type names struct {
	schema  string // unquoted
	base    string // unquoted table name
	table   string
	seq     string
	counts  string // the replay and rejection counts (tally.go)
	version string
	stale   string // index names are unqualified: CREATE INDEX takes no schema
	expiry  string
	lockKey int64 // the advisory lock that serialises migrations
}

func newNames(schema, table string) names {
	q := func(s string) string { return pgx.Identifier{schema, s}.Sanitize() }
	return names{
		schema:  schema,
		base:    table,
		table:   q(table),
		seq:     q(table + "_token"),
		counts:  q(table + "_counts"),
		version: q(table + "_version"),
		stale:   pgx.Identifier{table + "_stale"}.Sanitize(),
		expiry:  pgx.Identifier{table + "_expiry"}.Sanitize(),
		lockKey: lockKey(schema + "." + table),
	}
}

// lockKey derives the migration lock's key from the qualified table name
// (FNV-1a), so that stores on different tables do not wait for each other.
func lockKey(s string) int64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	// A fixed tag in the high bits keeps clear of small keys that
	// applications pick for their own advisory locks.
	return int64(h&0x0000ffffffffffff | 0x1de0<<48)
}

// ctx bounds one call by the statement timeout.
func (b *Backend) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	if b.timeout < 0 {
		return parent, func() {}
	}
	return context.WithTimeout(parent, b.timeout)
}
