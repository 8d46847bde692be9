package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/user"

	"github.com/idemkit/idem/idemadmin"
)

func resolveCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a := newAdminFlags("resolve",
		`DIR [-scope S] KEY (-committed -status N [-body-file F] [-content-type T] | -not-committed) -note "WHY" [-by WHO] [-keys FILES | -in-clear] [-json]`, `
Settles a stale claim by an operator's verdict: one whose lease ended and
that recovery could not resolve (it needs attention), or that no resolver
will resolve. -committed saves the result the effect had (its status and
body) as the key's result, replayed to every repeat; -not-committed releases
the claim, so the next request runs the effect. The key's story keeps who
settled it (-by, default the user running the command) and why (-note).

On an encrypted store (opened with keys: see -keys) a committed verdict needs
the active key, to seal the result; without it the command refuses and writes
nothing, unless -in-clear says that this result may be stored in clear (the
key's story then says so). The body is at most 1 MiB.

It changes the claim only with its fencing token, so it cannot overwrite a
holder that took the key meanwhile, and it refuses a claim whose lease is
live. It needs write access: it cannot run while a server holds the store;
use that server's admin handler then (idemadmin.Handler: POST settle).`, stderr,
		`idem resolve /var/lib/refund-tool/idem -scope shop-1 refund:order-7 -committed -status 201 -body-file re_7.json -note "the ledger has re_7"`,
		`idem resolve /var/lib/refund-tool/idem -scope shop-1 refund:order-8 -not-committed -note "the provider has no charge"`)
	scope := a.fs.String("scope", "", "the key's `scope` (default the empty scope)")
	committed := a.fs.Bool("committed", false, "the effect happened: save -status and -body-file as its result")
	notCommitted := a.fs.Bool("not-committed", false, "the effect did not happen: release the claim")
	status := a.fs.Int("status", 0, "the result's HTTP `status` (with -committed)")
	bodyFile := a.fs.String("body-file", "", "the result's body, read from `file` (with -committed)")
	contentType := a.fs.String("content-type", "", "the result's Content-Type `header` (with -committed)")
	note := a.fs.String("note", "", "why: what the operator checked (required)")
	by := a.fs.String("by", "", "who decides (default the user running the command)")
	inClear := a.fs.Bool("in-clear", false, "on an encrypted store without -keys: store this result in clear")
	pos, err := a.parse(args, "DIR", "KEY")
	if err != nil {
		return err
	}
	usage := func(format string, args ...any) error {
		fmt.Fprintf(stderr, "idem resolve: "+format+"\n", args...)
		a.fs.Usage()
		return errUsage
	}
	switch {
	case *committed == *notCommitted:
		return usage("give exactly one of -committed and -not-committed")
	case *committed && *status == 0:
		return usage("-committed needs -status")
	case *notCommitted && (*status != 0 || *bodyFile != "" || *contentType != ""):
		return usage("-not-committed saves no result: drop -status, -body-file and -content-type")
	case *note == "":
		return usage("-note is required: say why")
	}
	req := idemadmin.SettleRequest{Scope: *scope, Key: pos[0], Committed: *committed, Status: *status,
		By: *by, Note: *note, InClear: *inClear}
	if req.By == "" {
		req.By = "operator"
		if u, err := user.Current(); err == nil && u.Username != "" {
			req.By = u.Username
		}
	}
	if *bodyFile != "" {
		if req.Body, err = readBody(*bodyFile); err != nil {
			return err
		}
	}
	if *contentType != "" {
		req.Header = map[string][]string{"Content-Type": {*contentType}}
	}
	s, err := a.openStore(true, nil)
	if err != nil {
		return err
	}
	story, err := idemadmin.Settle(ctx, s, req, s.Options().Clock.Now())
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if a.json {
		return writeJSON(stdout, story)
	}
	return story.WriteText(stdout)
}

// readBody reads a settle's body from path, refusing one larger than a
// settle saves before reading it whole.
func readBody(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, idemadmin.MaxSettleBody+1))
	if err == nil && len(b) > idemadmin.MaxSettleBody {
		err = fmt.Errorf("-body-file %s: more than the %d bytes a settle saves", path, idemadmin.MaxSettleBody)
	}
	return b, err
}
