// Package idem makes side-effecting calls safe to retry.
//
// Agents repeat tool calls: the HTTP client retries a timeout, the agent
// loop re-runs a failed step, the model asks for the same action again, and
// a timeout never says whether the first attempt ran. Every write therefore
// carries an idempotency key naming the intended effect; a Store runs the
// effect once per key and hands the first result back to every repeat.
//
// The embedded default keeps its state in a Badger directory (Open), so a
// single binary needs no database server. The pgstore package runs the same
// contract on PostgreSQL for more than one process (New with its Backend).
// What a backend implements lives in package backend, the embedded one in
// package badgerstore: this package is what a tool server calls.
//
//	store, err := idem.Open("/var/lib/tool/idem", nil)
//	...
//	fp, err := idem.Fingerprinter{}.Sum("POST", "/refunds", "application/json", body)
//	res, replayed, err := store.Do(ctx, idem.Request{Scope: tenant, Key: key, Fingerprint: fp},
//		func(ctx context.Context) (idem.Result, error) {
//			return refund(ctx, body) // runs once per key
//		})
//
// # Semantics
//
// Every record lives under (scope, key): the same key in two scopes is two
// records. A request (scope, key, fingerprint) meets one of these:
//
//   - nothing stored, a released claim, or an expired record: the request
//     claims the key and runs the effect;
//   - a claim with a live lease and the same fingerprint: *InProgressError
//     (HTTP 409 with Retry-After);
//   - a claim whose lease ended: recovery asks the Resolver whether the
//     effect happened, and the request is answered as the verdict dictates
//     (replay, run, or *OutcomeUnknownError);
//   - a done record with the same fingerprint: the saved Result is replayed;
//   - any record with a different fingerprint: *MismatchError (HTTP 422);
//   - a malformed key: ErrInvalidKey (HTTP 400);
//   - storage failure: ErrUnavailable (HTTP 503), and the effect does not run;
//   - the effect ran but its outcome could not be recorded (storage failed
//     after it, or Close ran out of CloseTimeout under it):
//     *NotRecordedError (ErrOutcomeNotRecorded), never ErrUnavailable or
//     ErrClosed; the claim stays for recovery;
//   - the effect ran but its claim had been recovered first (its holder
//     was paused past the lease): through a LateCompleter backend, the
//     late result is recorded if the record is released or absent (Do
//     returns it as if Complete had succeeded), and otherwise the key is
//     marked Record.MayHaveRunTwice and Do returns a *RanTwiceError
//     (ErrRanTwice, ErrOutcomeNotRecorded).
//
// The claim is the lock: of any number of concurrent claimers exactly one
// wins. Each claim carries a fencing token that changes on every claim;
// Complete, Release, Extend and Hold succeed only with the current token,
// so a slow worker whose claim was recovered cannot overwrite the new
// owner's outcome. With Durability Durable (the default) a claim is synced
// to disk before the effect runs and a result before the caller is
// answered. Do extends the lease while the effect runs, so only a dead or
// hung holder lets it end. The error Policy decides per outcome whether to
// save it (DecisionSave), release the claim (DecisionRelease) or hold it
// for recovery (DecisionHold). A panic in the effect is an unknown outcome
// (it may have acted first): with a Resolver the claim is held for it, and
// the Resolver decides on the first access or sweep after
// Options.RecoveryGrace whether it committed;
// without one, or in a transactional effect (DoTx),
// which rolls back, the claim is released; either way the panic is
// re-raised. Done records replay for the retention period, decided by
// the store's Clock, then expire; Sweep reclaims them in bounded batches.
// On Open, every claim an earlier process left is orphaned at once and
// resolved through the Resolver. Every transition is reported to the
// Observer.
//
// A Fingerprinter digests what a request asks for: method, route, content type
// and body. JSON bodies are compared by meaning: member order, whitespace
// and escape forms do not matter, numbers compare by exact decimal value,
// and duplicate member names, excessive depth and size are errors. Other
// bodies are compared byte for byte. The digest names its algorithm
// (FingerprintAlgorithm), so a later release can change it.
//
// # Caveats
//
//   - Durability Fast survives a crash of the process but not a power loss:
//     a claim or a result may be forgotten and an effect run twice.
//   - Without a Resolver, a claim whose holder died stays in progress and
//     every repeat gets ErrOutcomeUnknown until an operator decides: idem
//     never guesses that an effect did not happen.
//   - The key must name the intended effect and be decided once, when the
//     agent plans the action (see KeyDeriver); a key regenerated on retry
//     defeats any store.
//   - Set Retention longer than the longest pause a run can take: a repeat
//     after expiry runs the effect again, and a late completion that finds
//     the record expired and reclaimed records its result as a new life,
//     unaware of any run in between (none is, within the retention).
//   - With the system clock, a replay of a record
//     with over a minute to live is judged on a clock reading refreshed
//     every 100 ms in the background rather than a fresh one, which would
//     cost as much as the rest of the replay. Expiry is still judged
//     exactly unless that refresh stalls for over a minute (the process
//     stopped or starved that long), and then late by no more than the
//     stall's excess over the minute; such a replay's LastReplay may be up
//     to 100 ms early. Any other Clock is read on every request.
//   - The embedded backend (badgerstore) serves one process at a time (it locks its
//     directory); use pgstore for several replicas.
//   - Saved responses are stored in clear unless Options.Keys is set; with
//     it, result bodies and headers, saved errors and journal arguments are
//     encrypted before any backend sees them, while scopes, keys,
//     fingerprints, states, times, counts and status codes stay in clear:
//     keys and scopes must not carry secrets (docs/encryption.md).
//   - A store directory holds saved responses. Open (for writing) makes it
//     0700 and the files in it 0600, whatever the umask or the mode it was
//     created with, and every file and directory the store creates later
//     (tables, value logs, its log, the quarantine, a restored copy) is
//     created 0600 or 0700.
//   - The Store caches done records in memory (about 16 MiB) and replays
//     them without asking the backend until they expire on its clock: a
//     done record changes only by expiry. With pgstore and several
//     processes, one whose clock runs ahead may run a key again up to the
//     skew before this one stops replaying it; a row changed by hand is
//     not seen until it expires or the Store reopens (docs/replay-cache.md).
//   - A replayed Result (from Begin or Do) may be shared with every other
//     replay of its key, so that a replay copies nothing: read its Header
//     and Body, never modify them.
//   - A record's counts of replays and rejections are written in batches,
//     at most once per record per Options.CountInterval: they lag by about
//     one interval, a crash loses the last interval's, and a table of
//     pending counts found full drops some. A count is never more than the
//     truth, and exact unless Store.CountsApproximate says it is a lower
//     bound (docs/contract.md, "Counts"); over pgstore and redisstore every
//     count is reported as a lower bound.
//   - Observers run synchronously on the request path; keep them quick.
//   - A fingerprint over JSON that nests objects deeply and out of order
//     costs more the deeper it goes; Fingerprinter.MaxDepth bounds it.
package idem
