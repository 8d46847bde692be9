// Package idemadmin holds the operator's views of an idem store: the story
// of one key as a timeline, listings with the claims that need someone
// first, statistics, a sweep that reports each decision, and an export for
// audits. The idem command line (cmd/idem) prints them from a store
// directory; Handler serves them as JSON and as an HTML page from a
// running server, which is the only way to see a Badger store while its
// server holds the directory.
// CountEvents counts every event and SetGauges keeps gauges of the store's
// contents through a small Metrics interface, which Expvar adapts to the
// standard expvar package.
//
//	vars := new(expvar.Map)
//	expvar.Publish("idem", vars) // a name of your own, once
//	metrics := idemadmin.Expvar(vars)
//	var decisions idemadmin.Decisions
//	store, err := idem.Open(dir, &idem.Options{Resolver: ledgerCheck,
//		Observer: idem.Observers(&decisions, idemadmin.CountEvents(metrics))})
//	...
//	admin := idemadmin.Handler(store, &idemadmin.HandlerOptions{
//		Authorize: func(r *http.Request, a idemadmin.Access) error {
//			return requireRole(r, "idem-"+a.String()) // your own check: read, bodies, sweep
//		},
//		Decisions: &decisions, Metrics: metrics,
//	})
//	opsMux := http.NewServeMux() // served on an internal listener, not the public one
//	opsMux.Handle("/admin/idem/", http.StripPrefix("/admin/idem", admin))
//
// # Mounting the handler safely
//
// Handler requires an Authorizer and asks it on every request, for the
// access the request needs: reading the views, reading saved bodies (an
// export asks for them only with bodies=true), running a sweep (POST,
// which asks the resolver and writes), or downloading a backup of the
// whole store (GET backup, bodies and backup access). Serve it on an internal listener
// or behind the server's authentication, never on the public mux next to
// the tools, and keep bodies and sweep access for the few who need them.
//
// The page (ui/) is safe to open in the browser an operator uses for
// everything else: html/template escapes every stored value (keys, scopes,
// notes and bodies come from callers), no script runs (its
// Content-Security-Policy forbids all), no other site may frame it, its
// forms are POST only with a CSRF token bound to a cookie, and the handler
// refuses cross-origin POSTs, JSON included.
//
// Importing idem (through Badger) imports the standard expvar package,
// which publishes /debug/vars on http.DefaultServeMux: Badger's counters,
// the process's command line and its memory statistics. A server that
// serves http.DefaultServeMux (http.ListenAndServe(addr, nil)) serves that
// page to anyone who reaches it, whatever the Authorizer says. Serve your
// own ServeMux, as above; Expvar publishes idem's metrics only into the
// *expvar.Map you give it.
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
//     the effect again; the next sweep reclaims it;
//   - may have run twice (ran_twice, a mark beside the condition): a holder
//     paused past its lease finished its effect after the key was claimed
//     again (idem.Record.MayHaveRunTwice); the story tells which claim.
//
// Listings put the records that may have run twice first, then the claims
// needing attention, then stuck ones, then live claims, then done and
// released records, each group oldest first.
// A record's age is the time since it entered its state: its claim for
// one in progress, its completion or release for the others.
//
// # Caveats
//
//   - ls, stats and export scan every record (Lister.Scan), and so do the
//     page's records and stats: their cost grows with the store. Rate-limit the admin handler too: its Authorizer
//     decides who, not how often.
//   - Replay and rejection counts are flushed in batches (see
//     idem.Record.Replays): a live view may lag by a second, and a crash
//     may lose the last second's counts.
//   - A record keeps the first and the latest backend.KeptAttempts claims;
//     the timeline says how many in between were not kept.
//   - Sweep reports the decisions its Decisions observer sees while it
//     runs. The observer must be in the store's Options from Open, and it
//     also sees recovery done on the request path meanwhile.
//   - On an encrypted store served by a Store without its key, inspect
//     and the page show a sealed result as sealed (its status, not its
//     body), export writes it with sealed_under and no body, and a
//     committed settle is refused (409) unless in_clear says the result
//     may be stored in clear (docs/encryption.md).
//   - Badger locks its directory: a process that opens it read-only cannot
//     while a server holds it, and a server cannot start while a read-only
//     reader holds it.
package idemadmin
