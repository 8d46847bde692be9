// Package redisstore is the Redis and Valkey backend of idem: several
// processes share one store on a server they already run, with the
// contract of every backend, and durable only where the server's
// settings make it so.
//
//	b, err := redisstore.Open(ctx, "redis://127.0.0.1:6379/0", nil)
//	store := idem.New(b, opts)
//
// New takes a client the caller owns instead (any redis.UniversalClient:
// one server, Sentinel, or a Cluster). The client is
// github.com/redis/go-redis/v9: its UniversalClient serves one server, a
// Sentinel group and a Cluster behind one interface, its scripts fall back
// from EVALSHA to EVAL when a restarted server lost its script cache, and a
// pipeline keeps a write and its WAIT on one connection. valkey-go would
// serve as well; go-redis is the one idem's bench already measures Redis
// with, and it speaks to Valkey unchanged.
//
// # Semantics
//
// One Redis hash per record, under the key {prefix:n}:r:scope\x00key: its
// field b holds the whole backend.Record in the shared encoding
// (backend.EncodeRecord, checksummed and versioned, so a record reads alike
// from every backend and the command line's export reads it unchanged); v,
// t and s hold the record's version, token and state, which the scripts
// check without decoding it. A hash of fields, one per Record field, would
// let Lua change a record in place, but would give up the checksum and
// the shared format, and the story and result do not fit flat fields.
//
// Every write is a Lua script, atomic on the server: the Backend reads the
// record, computes the new one in Go, and the script writes it only if the
// version is still the one read, and, for Complete, Release, Extend, Defer
// and Hold, only if the record is in progress with the caller's token (a
// holder whose claim was recovered changes nothing and gets a
// *backend.FencedError). A version comes from a counter of the record's
// shard, so it never comes back: a write never lands on a record that
// changed and changed back. When the version moved (another writer won),
// the Backend reads again and decides on the record as it is now: Claim
// answers with the winner's record, a fenced write is refused if the token
// moved, CompleteLate decides its outcome anew. Claim draws its token from
// one INCR counter of the store (prefix:tokens) before writing: tokens
// never repeat and grow with time on every key; a claim that loses its
// race leaves its token unused.
//
// A key's {tag} is its shard, one of Shards (16), hashed from scope and key:
// the record, its shard's stale index, expiry index and version counter
// share one tag, so one Cluster slot, and a script touches only keys of
// one slot. The token counter is the one key outside the shards, written
// by INCR alone. The conformance suite runs on a Cluster of three
// primaries too (TestConformance_Cluster).
//
// Expiry is the server's: a done or released record's key gets a TTL of
// its retention (ExpiresAt minus the write's time, measured on the
// server's clock from the write) plus Options.ExpiryMargin, and the server
// deletes it then; an open claim has no TTL. The TTL is relative rather
// than a PEXPIREAT at ExpiresAt because the Store's clock is its own (an
// injected one in tests, a host's with its own offset in production), and
// a relative TTL measures the same retention whatever the offset. The
// Store still judges expiry with its clock: a record past its ExpiresAt is
// claimable while the server keeps it. Reclaim meets its contract through
// each shard's expiry index (a sorted set by ExpiresAt): it deletes the
// records the Store's clock finds expired before their TTL ran out, and
// drops the index entries of records the server already deleted; in
// production, where the clocks agree, it mostly does the latter.
//
// Stale reads each shard's stale index, a sorted set of the open claims
// that do not need attention scored by when they are due (the later of the
// lease end and the next check), up to limit members a shard in one
// pipelined round trip, then their records: its cost follows the open
// claims, not the done records. The counts of replays and rejections
// (backend.Tallier) arrive in batches: one pipelined round trip reads a
// batch's records, and each is written back over its version.
//
// # Durability
//
// Durable (the default) means a write is in the append-only file and
// fsynced before the server answers, and so before idem answers: New
// refuses a server unless it has appendonly yes and appendfsync always
// (Redis fsyncs the file before it sends the replies of an event-loop
// round, so concurrent writers share one fsync), and maxmemory-policy
// noeviction (an evicted record is a forgotten result, so a repeat would
// run again). The error wraps ErrNotDurable and names the setting. With
// Options.Replicas, every write also waits (WAIT) until that many replicas
// acknowledged it, and fails with backend.ErrUnavailable when fewer did.
//
// Fast opens on any server, and what a crash loses depends on its
// settings. With appendfsync everysec Redis still writes the file before
// it answers, unless an fsync is running late (it postpones the write by
// up to two seconds then): a crash of the server process alone loses at
// most the writes so postponed, and a crash of the machine or a power
// loss the writes of about the last two seconds. With appendfsync no, a
// machine crash loses what the operating system had not written (up to
// about 30 seconds on Linux); with appendonly no, any crash loses every
// write since the last snapshot. A lost claim lets its effect run again; a
// lost result makes a repeat run the effect again. TestCrash_* in this
// package measures each setting under SIGKILL of the server.
//
// A server for idem:
//
//	appendonly yes
//	appendfsync always
//	maxmemory-policy noeviction
//	# with replicas, and Options.Replicas = 1:
//	min-replicas-to-write 1
//
// # Failover
//
// Redis replication is asynchronous. A failover (Sentinel, Cluster, or an
// operator's REPLICAOF NO ONE) promotes a replica that may lack the last
// writes the old primary acknowledged: claims, whose effects may then run
// again, and results, whose repeats then run the effect again. WAIT with
// Options.Replicas narrows the window to writes no replica had received,
// but is no consensus: a failover may still promote a replica that was not
// among those that acknowledged. The token counter can be rolled back too,
// and a token drawn again after a failover can match a claim of a slow
// holder that the lost writes had taken over. Where a failover must lose
// nothing, use PostgreSQL (pgstore) with synchronous replication; a
// failover on Redis is a loss window, as the embedded store's accepted
// loss is, and the Resolver is the way to settle the keys it touched.
//
// # Caveats
//
// A Durable Backend reads the server's settings when it opens and again
// at every background sweep (Maintain): between two sweeps, a CONFIG SET
// appendfsync everysec goes unnoticed; after it, new claims are refused
// until the setting is restored. A managed service
// that renames or forbids CONFIG cannot be checked; open it with Fast and
// configure it by hand. Records written by a Backend with one Prefix are
// invisible to another, and Shards is fixed. The key layout's version is
// kept under prefix:layout; New refuses one it does not know
// (ErrLayout). Scan (the command line's ls and
// export) walks the keyspace with SCAN: it sees every record present during
// the whole walk at least once, and may see a record twice.
package redisstore
