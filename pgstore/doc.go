// Package pgstore is the PostgreSQL backend of idem: several processes (the
// replicas of a tool server behind a load balancer) share one store and keep
// every guarantee of the embedded default. Moving from Badger is one line:
//
//	backend, err := pgstore.New(ctx, pool, nil) // pool is the caller's *pgxpool.Pool
//	store := idem.New(backend, opts)
//
// New creates the tables it needs, or upgrades them, on first use. The pool
// stays the caller's: the Store closes the Backend, never the pool.
//
// # Semantics
//
// One row per (scope, key) in the records table (default idem_records in the
// pool's current schema) holds the whole backend.Record in columns. Times are
// stored as int64 nanoseconds of the Unix epoch, exactly as the Store's clock
// gave them, and every decision about leases and expiry compares them with
// the time the Store passes in: the database's own clock is never read, so
// tests with a fake clock behave as production does. To read them in psql,
// use to_timestamp(col / 1e9); the smallest int64 stands for the zero time.
//
// Claim is one round trip: a pipelined INSERT ... ON CONFLICT DO NOTHING
// takes an absent key, and a conditional UPDATE takes a released or expired
// one (keeping a released record's first-seen time, claim count, story and
// counts, starting an expired one afresh). Both are single atomic
// statements, so of any number of claimers of one key, in any number of
// processes, exactly one wins under READ COMMITTED; the others read the
// winner's row. Tokens come from a PostgreSQL sequence and never repeat on
// a server, nor through a failover to a synchronous standby (see Caveats).
// When most of a Backend's recent claims found their key taken (replays of
// done keys, retries of held ones), Claim reads first: one plain SELECT
// answers a done or held key, and only an absent, released or expired one
// goes on to the batch, a round trip more; when almost all claimed, it
// sends the INSERT alone, the batch following only for a key that exists
// (see docs/pgstore-replay.md).
//
// Complete, Release, Extend and Defer are fenced: one UPDATE whose WHERE
// clause names the key, the in-progress state and the token, so a holder
// whose claim was recovered changes nothing and gets an *backend.FencedError.
//
// A record's story (backend.Record.Attempts) is a jsonb array in the attempts
// column, changed only by SQL inside the statements above: the claim
// appends the new attempt (keeping the first and the latest ones, at most
// backend.KeptAttempts), Complete and Release end it. It is written with the row,
// atomically, and costs no extra round trip. The counts of replays and
// rejections (backend.Tallier) arrive from the Store in batches, and go to
// a narrow table of their own beside the records (Table_counts): AddTallies
// inserts or adds to one row of a few numbers per counted record, with one
// INSERT ... SELECT ... FROM unnest(...) ON CONFLICT DO UPDATE per few
// thousand records, writing the rows in (scope, key) order so that
// concurrent batches cannot deadlock. A replay thus never writes its
// record's row. Get, Scan and Stale add a record's row of counts to the
// counts in its own columns (which hold what was counted before schema 4);
// Claim's answers carry only the latter, except for the claim of a released
// record, whose life and counts go on. Reclaim deletes a record's counts
// with it, and a claim of an expired record deletes the old life's
// (tally.go). The backend keeps no count ledger (backend.CountLedger):
// processes share it, and one that dies with counts in memory is not seen
// by the others, so a Store over it reports every count as a lower bound
// (idem.Store.CountsApproximate).
//
// Stale walks a partial index of the open claims (its cost grows with them,
// not with the table) and hands each stale claim to one backend instance at
// a time: it locks the due rows with FOR UPDATE SKIP LOCKED and marks them as
// handed to this instance until Options.HandOut later in store time. Other
// instances skip them until then, or until a fenced write settles the claim;
// the instance that holds them sees them again, so one instance's successive
// sweeps are not disturbed. The hand-out only keeps instances from doing the
// same work: safety rests on fencing, so if a hand-out lapses while its
// holder still works (a slow resolver, a skewed clock), the worst case is
// that two instances ask the Resolver about one claim and one of their
// fenced writes is refused.
//
// # Transactional effects
//
// When the effect's writes live in the same database, run it with idem.DoTx (pgstore.Backend is a backend.TxBackend[pgx.Tx]):
// fn writes with a pgx.Tx, and when the error policy saves the outcome the
// complete UPDATE (fenced by the token, locking the record's row) runs in
// that transaction before it commits. The effect thus commits exactly when
// the record turns done: a holder paused past its lease, whose claim was
// recovered meanwhile, finds the token changed and rolls back; a recovery
// that comes while the holder's commit is under way waits for the row's
// lock and then finds the record done. DoTx's claim is written with its
// attempt marked "transactional", and recovery releases such a stale claim
// at once without the Resolver (backend.Transactor): it cannot have committed.
// A release, a hold or a panic rolls the transaction back. It costs the
// round trips of Do with a separate INSERT: the claim, fn's statements (the
// BEGIN goes with the first), the completion with the COMMIT; and a commit
// fewer. This is brandur's "atomic phases" with the
// lease and the fencing token of idem around it.
//
// Effects outside the database (plain Store.Do) have no such guarantee: a
// paused holder can still act after recovery decided. Pass the fencing token
// downstream (idem.ClaimFromContext) where the downstream can refuse older
// tokens. What such a holder did is not lost: its fenced completion is
// recorded late (backend.LateCompleter) in one transaction that locks the
// record's row first (SELECT ... FOR UPDATE), then saves the result if the
// row is released or absent (an INSERT ... ON CONFLICT DO NOTHING, which
// starts over when a claim inserted the row meanwhile), or sets the twice
// column (backend.Record.MayHaveRunTwice) if the key was claimed again. Claims,
// completions and releases of the key wait for that lock and then see the
// late outcome. The story is rebuilt in Go and written whole, since the
// late attempt need not be the last.
//
// Reclaim deletes expired done and released records in batches of at most
// its limit, skipping rows that another transaction holds.
//
// Errors: a lost connection, a failover, an administrator's shutdown, a
// statement timeout, a full pool and every other failure of the database
// are reported as errors wrapping backend.ErrUnavailable (the Store then runs
// no effect); a deadline, the caller's or Options.StatementTimeout's, also
// matches context.DeadlineExceeded. A caller's cancellation gives an error
// wrapping context.Canceled. A row that cannot be decoded gives an error
// wrapping backend.ErrCorrupt. An error is never turned into a claim or a
// replay.
//
// # Caveats
//
// A statement whose commit was acknowledged by the server but whose answer
// was lost with the connection is reported as unavailable although it took
// effect. For Claim that leaves a claim nobody holds; it goes stale when its
// lease ends and recovery resolves it (the Resolver finds the effect did not
// run). For Complete, the caller is told its outcome was not recorded when
// it was.
//
// The records table is expected to be used under READ COMMITTED, the
// PostgreSQL default. Under REPEATABLE READ or SERIALIZABLE the statements
// stay correct, but concurrent claims fail with serialization errors more
// often; they are retried with a jittered back-off (up to eight attempts
// within the statement timeout), then reported as unavailable.
//
// Each Store replays the done records it completed or read from its own
// memory until they expire on its clock, without a round trip (see
// idem's docs/replay-cache.md). Another instance cannot change a done
// record before it expires, but one whose clock runs ahead may reclaim it
// or run the key again up to the skew earlier, and a row changed by hand
// is not seen by a running Store until it expires: keep the instances'
// clocks in sync and change rows only through idem.
//
// Counts are statistics, not a ledger: those a flush writes while a
// claim starts the record's new life, or while Reclaim deletes it, may be
// dropped, and a row of counts that such a race (or an instance of an
// older release) leaves without its record stays in the counts table until
// the key is counted or reclaimed again. It counts for nothing meanwhile:
// a row of counts names the life it belongs to (tally.go).
//
// The hand-out deadline is computed from the sweeping instance's clock and
// compared with the others' clocks: keep the instances' clocks within a
// fraction of HandOut of each other, or sweeps do some work twice.
//
// Informational text (a release's reason, the owner's name, the story's
// wording, which the Store chooses) is stored as text: invalid UTF-8 in it is replaced and NUL bytes are dropped.
// Fingerprints and results are stored as bytes and come back exactly.
// Times before the year 1678 or after 2262 are clamped to that range.
//
// A failover to an asynchronous standby loses what the standby had not
// received: acknowledged results (their effects run again on retry), and
// the sequence's latest values, which the promoted server can hand out
// again. A holder of a claim so lost, still running, could then pass the
// fence of a new claim of the same key that drew the same token. A
// synchronous standby (Options.FailoverSafe, docs/pgstore.md "Failover")
// has every acknowledged claim's token before the claim is acknowledged.
//
// Durability is PostgreSQL's: with synchronous_commit on (the default) a
// claim and a result are on disk (and on synchronous standbys) before they
// are acknowledged; turning it off trades that away as the Badger backend's
// Fast mode does.
package pgstore
