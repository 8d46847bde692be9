// Package idemadmin holds the operator's views of an idem store: the story
// of one key as a timeline, listings with the claims that need someone
// first, statistics, a sweep that reports each decision, and an export for
// audits. The idem command line (cmd/idem) prints them from a store
// directory; Handler serves them as JSON from a running server, which is
// the only way to see a Badger store while its server holds the directory.
// CountEvents counts every event and SetGauges keeps gauges of the store's
// contents through a small Metrics interface, which Expvar adapts to the
// standard expvar package.
//
//	vars := new(expvar.Map)
//	expvar.Publish("idem", vars) // a name of your own, once
//	metrics := idemadmin.Expvar(vars)
//	var decisions idemadmin.Decisions
//	store, err := idem.Open(dir, &idem.Options{Resolver: ledgerCheck,
//		Observer: idemadmin.Tee(&decisions, idemadmin.CountEvents(metrics))})
//	...
//	mux.Handle("/admin/idem/", http.StripPrefix("/admin/idem", requireAdmin(
//		idemadmin.Handler(store, &idemadmin.HandlerOptions{Decisions: &decisions, Metrics: metrics}))))
//
// # Semantics
//
// Every view is computed from stored records as of a "now" the caller
// gives (the store's clock, by default, for Handler), so the same store and
// the same now always give the same output. The views judge records as the
// store would at that now:
//
//   - stuck: in progress and its lease ended (its holder died or hung, or a
//     restart orphaned it), awaiting recovery;
//   - needing attention: recovery gave up after Options.MaxUnknown
//     inconclusive answers; an operator must decide;
//   - expired: done or released and past its ExpiresAt, so a repeat runs
//     the effect again; the next sweep reclaims it.
//
// Listings put the claims needing attention first, then stuck ones, then
// live claims, then done and released records, each group oldest first.
// A record's age is the time since it entered its state: its claim for
// one in progress, its completion or release for the others.
//
// # Caveats
//
//   - ls, stats and export scan every record (Lister.Scan): their cost grows
//     with the store. Keep a live server's admin handler behind its own
//     authorization and rate limits; it exposes keys, fingerprints and, in
//     exports, saved bodies.
//   - Replay and rejection counts are flushed in batches (see
//     idem.Record.Replays): a live view may lag by a second, and a crash
//     may lose the last second's counts.
//   - A record keeps the first and the latest idem.MaxAttempts claims;
//     the timeline says how many in between were not kept.
//   - Sweep reports the decisions its Decisions observer sees while it
//     runs. The observer must be in the store's Options from Open, and it
//     also sees recovery done on the request path meanwhile.
//   - Badger locks its directory: a process that opens it read-only cannot
//     while a server holds it, and a server cannot start while a read-only
//     reader holds it.
package idemadmin
