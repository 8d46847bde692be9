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
// check without decoding it; rp, cf, mm, lr and lj hold counts added
// beside it (below). A hash of fields, one per Record field, would let
// Lua change a record in place, but would give up the checksum and the
// shared format, and the story and result do not fit flat fields.
//
// Every write is a Lua script, atomic on the server: the Backend computes
// the new record in Go, and the script writes it only if the version is
// still the one the Backend knows, and, for Complete, Release, Extend,
// Defer and Hold, only if the record is in progress with the caller's
// token (a holder whose claim was recovered changes nothing and gets a
// *backend.FencedError). A version comes from a counter of the record's
// shard, so it never comes back: a write never lands on a record that
// changed and changed back. When the version moved (another writer won),
// the Backend reads again and decides on the record as it is now: Claim
// answers with the winner's record, a fenced write is refused if the token
// moved, CompleteLate decides its outcome anew.
//
// A cycle is two round trips and two writes. Claim sends the claim script
// over the version it expects (none, for a key it has not read): the
// script draws the token and writes the claim, or answers with the record
// as it is, on which Claim decides (a replay, a claim in progress, a
// mismatch; a released or expired record is claimed over its version).
// The claim's bytes carry token 0 and field t the token the script drew;
// a read puts it in. While most of its recent calls found a record,
// Claim reads first with a plain HMGET of the bytes, version and token
// instead, so that a replay costs the server a read, not a script. The Backend keeps the open claims it
// made, with the version it wrote (up to 16,384): Complete, Release,
// Extend, Hold and Defer of one of them write over that version in one
// round trip, and read first only when the record changed since.
//
// Tokens are drawn inside the claim script from the shard's token hash,
// {prefix:n}:tok: an epoch (milliseconds of the server's clock since
// 2025) and a count within it, joined with the shard. A new epoch, past
// the last and never behind the server's clock, begins whenever the
// server drawing is not the one that began the current epoch (its
// replication id differs: a replica promoted by a failover and a
// restarted server each draw a new one), and every 255 tokens. So tokens
// never repeat in a store and grow with time on every key, a failover included, provided
// the servers' clocks differ by less than a failover takes (Sentinel's
// down-after-milliseconds, seconds); a token stays below 2^53.
//
// Counts of replays and rejections (backend.Tallier) reach the server in
// batches the Store merges in memory per key, once per
// idem.Options.CountInterval: one
// pipelined round trip of one script call per shard that adds each
// record's counts to its count fields (HINCRBY), with no read and no
// record rewritten. A read adds the fields to the counts the bytes hold, and a
// write of the record leaves them out of its bytes; a claim that starts a
// new life drops them. A replay is never a write. The backend keeps no
// count ledger (backend.CountLedger): processes share it, and one that
// dies with counts in memory is not seen by the others, so a Store over
// it reports every count as a lower bound (idem.Store.CountsApproximate).
//
// A key's {tag} is its shard, one of Shards (16), hashed from scope and key:
// the record, its shard's stale index, expiry index, version counter
// and token hash share one tag, so one Cluster slot, and a script touches
// only keys of one slot. The conformance suite runs on a Cluster of three
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
// claims, not the done records.
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
// Options.Replicas set to the number of replicas makes every write wait
// until each replica has it, so a promoted replica holds every
// acknowledged write; it is no consensus (with fewer than every replica a
// failover may promote one that did not acknowledge, and a write whose
// WAIT failed may still be on the primary). Tokens stay unique through a
// failover (above). Where a failover must lose nothing without counting
// on WAIT, use PostgreSQL (pgstore) with synchronous replication; the
// Resolver settles the keys a failover touched. TestFailover_Sentinel
// kills the primary of a group with three Sentinels under load, and
// docs/nemesis.md has its counts.
//
// Valkey: the scripts use only what Redis 7 and Valkey 7.2 and later
// both accept (effects replication, INFO and TIME in a script); Debian
// ships no Valkey server, so the tests run on Redis 7.0 only.
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
// (ErrLayout); it moves layout 1 to 2, after which an older release
// refuses the store: stop every older process before a newer one opens
// it. Scan (the command line's ls and
// export) walks the keyspace with SCAN: it sees every record present during
// the whole walk at least once, and may see a record twice.
package redisstore
