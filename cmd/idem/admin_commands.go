package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/idemadmin"
)

// The operator's subcommands, registered in main.go's table.

const readOnlyNote = `It opens the store read-only, which works while no server holds the
directory; while one does, use that server's admin handler (idemadmin.Handler).
DIR may be a redis:// URL instead (add ?prefix=P for redisstore.Options.Prefix P):
the command then reads the records on that Redis or Valkey server.`

func inspectCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a := newAdminFlags("inspect", "DIR [-scope SCOPE] [-json] KEY", `
Tells the story of one key: when it was first seen, each claim (token, owner)
and how it ended (completed with its status, released and why, recovered and
how, orphaned by a restart, completed late after recovery, or finished after
the key was claimed again: may have run twice), the replays and the 409/422 rejections it served,
and when it expires. A result sealed under a key not given (-keys) is shown
as sealed, with its status; the rest of the story needs no key.

`+readOnlyNote, stderr,
		"idem inspect /var/lib/refund-tool/idem -scope shop-1 refund:order-1004")
	scope := a.fs.String("scope", "", "the key's `scope` (default the empty scope)")
	pos, err := a.parse(args, "DIR", "KEY")
	if err != nil {
		return err
	}
	key := pos[0]
	if err := backend.ValidateKey(key); err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	s, err := a.openStore(false, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	story, err := idemadmin.Inspect(ctx, s, *scope, key, s.Options().Clock.Now())
	if errors.Is(err, idem.ErrNotFound) {
		return fmt.Errorf("no record of key %q in scope %q: never claimed, or expired (or released) and reclaimed", key, *scope)
	}
	if err != nil {
		return err
	}
	if a.json {
		return writeJSON(stdout, story)
	}
	return story.WriteText(stdout)
}

func lsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a := newAdminFlags("ls", "DIR [-state S] [-scope SCOPE] [-older-than AGE] [-limit N] [-json]", `
Lists records: those whose effect may have run twice first (a holder paused
past its lease finished after the key was claimed again; "RAN TWICE?"), then
those needing attention (recovery gave up on them), then stuck claims (in
progress, lease ended, awaiting recovery), then live claims, then done and
released records, each group oldest first. AGE is the time
since a record entered its state (90s, 15m, 2h, 7d).

`+readOnlyNote, stderr,
		"idem ls /var/lib/refund-tool/idem -state stuck -older-than 15m")
	state := a.fs.String("state", "", "keep one `state` or condition: in_progress, done, released, stuck, attention, expired, ran_twice")
	scope := a.fs.String("scope", "", "keep one `scope` (-scope '' keeps the empty scope)")
	olderThan := a.fs.String("older-than", "", "keep records in their state at least this `age` long")
	limit := a.fs.Int("limit", 50, "show at most this many records; 0 shows all")
	_, err := a.parse(args, "DIR")
	if err != nil {
		return err
	}
	f := idemadmin.Filter{State: *state, Limit: *limit}
	a.fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "scope" {
			f.Scope = scope
		}
	})
	if *olderThan != "" {
		if f.MinAge, err = idemadmin.ParseAge(*olderThan); err != nil {
			fmt.Fprintf(stderr, "idem ls: -older-than: %v\n", err)
			return errUsage
		}
	}
	if err := f.Check(); err != nil {
		fmt.Fprintf(stderr, "idem ls: %v\n", err)
		return errUsage
	}
	s, err := a.openStore(false, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	f.Now = s.Options().Clock.Now()
	f.Approximate = s.CountsApproximate
	c := newScanCounter(stderr, "scanned")
	f.Progress = c.progress()
	out, err := idemadmin.List(ctx, s.Backend().(backend.Lister), f)
	c.finish()
	if err != nil {
		return err
	}
	if a.json {
		return writeJSON(stdout, out)
	}
	if err := out.WriteText(stdout); err != nil {
		return err
	}
	// The directory lock was free, so no process holds these claims: the
	// next open for writing orphans them, whatever their lease says.
	if isRedisURL(a.dir) {
		return nil // processes share the server: its claims may be held
	}
	live := 0
	for _, r := range out.Rows {
		if r.Condition == "in_progress" {
			live++
		}
	}
	if live > 0 {
		what, pronoun := fmt.Sprintf("the %d claims shown in progress are", live), "them"
		if live == 1 {
			what, pronoun = "the claim shown in progress is", "it"
		}
		fmt.Fprintf(stdout, "\nNo process holds this store, so %s held by nobody:\n"+
			"the next open for writing (a server start, or idem sweep) orphans %s for recovery.\n", what, pronoun)
	}
	return nil
}

func statsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a := newAdminFlags("stats", "DIR [-json]", `
Counts the records by state, with the stuck claims and those needing
attention, the oldest open claim, the expiry horizon (when the last record
expires) and the bytes the store takes on disk.

`+readOnlyNote, stderr,
		"idem stats /var/lib/refund-tool/idem")
	if _, err := a.parse(args, "DIR"); err != nil {
		return err
	}
	s, err := a.openStore(false, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	c := newScanCounter(stderr, "scanned")
	st, err := idemadmin.Collect(ctx, s.Backend().(backend.Lister),
		idemadmin.StatsOptions{Now: s.Options().Clock.Now(), Progress: c.progress()})
	c.finish()
	if err != nil {
		return err
	}
	if a.json {
		return writeJSON(stdout, st)
	}
	return st.WriteText(stdout)
}

func sweepCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a := newAdminFlags("sweep", "DIR [-json]", `
Runs recovery and reclamation now, and reports each decision.

The command line has no downstream to ask whether a claim's effect happened,
so it runs without a resolver: it only reports stale claims (leaving them in
progress: repeats keep getting "outcome unknown" until the server's resolver
or an operator decides) and reclaims expired records. To recover with the
server's resolver, POST sweep to its admin handler (idemadmin.Handler).

It needs write access: it cannot run while a server holds the store. Opening
the store for writing orphans the claims an earlier process left open, as a
server start would; they are reported as stale.`, stderr,
		"idem sweep /var/lib/refund-tool/idem")
	if _, err := a.parse(args, "DIR"); err != nil {
		return err
	}
	var d idemadmin.Decisions
	s, err := a.openStore(true, &d)
	if err != nil {
		return err
	}
	res, err := idemadmin.Sweep(ctx, s, &d)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if a.json {
		return writeJSON(stdout, res)
	}
	return res.WriteText(stdout)
}

func exportCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a := newAdminFlags("export", "DIR [-no-bodies] [-json]", `
Writes every record to stdout as JSON lines, one record a line, for audits:
its state, fingerprint, token, times, every claim kept with its outcome, the
replay and rejection counts, and the saved result with its body in base64.
A sealed result is written with the key it is sealed under (sealed_under) and
no body: export never opens results.

`+readOnlyNote, stderr,
		"idem export /var/lib/refund-tool/idem -no-bodies > audit.jsonl")
	// JSON lines are export's only format: -json, which every operator
	// command takes, changes nothing.
	a.fs.Lookup("json").Usage = "JSON lines, the only format export writes (taken like the other commands' -json)"
	noBodies := a.fs.Bool("no-bodies", false, "leave saved bodies out (their length stays)")
	if _, err := a.parse(args, "DIR"); err != nil {
		return err
	}
	s, err := a.openStore(false, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	c := newScanCounter(stderr, "exported")
	_, err = idemadmin.Export(ctx, s.Backend().(backend.Lister), stdout,
		&idemadmin.ExportOptions{NoBodies: *noBodies, Progress: c.progress()})
	c.finish()
	return err
}
