package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
)

// lossResult is what -json prints.
type lossResult struct {
	Dir    string                  `json:"dir"`
	Window *badgerstore.LossWindow `json:"window,omitempty"`
	// InForce is true while the window has not ended.
	InForce bool `json:"in_force"`
	// Ended is true when this run ended the window (-end).
	Ended bool `json:"ended,omitempty"`
}

func lossCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a := newAdminFlags("loss", `DIR [-accept [-window D] | -end] [-json]`, `
Shows the loss window of a store: the time after an operator accepted a
loss (tables, logs or the mark lost) during which a claim on a key that is
absent, or was released or expired before the loss, is held and the
Resolver asked before its effect runs, since the key's latest write may be
one the loss took.

-accept opens a store that refuses to open because it came back with less
than it held (badgerstore.Options.AcceptLoss): the loss is logged and accepted,
and a window opens lasting -window; give the Retention (or the longest
Request.Retention) the server uses. -end ends the window now, for an
operator who has settled the keys lost. Both need write access: they cannot
run while a server holds the store.`, stderr,
		"idem loss /var/lib/refund-tool/idem",
		"idem loss /var/lib/refund-tool/idem -accept -window 24h")
	accept := a.fs.Bool("accept", false, "accept the loss the store comes back with, and open a window")
	window := a.fs.Duration("window", idem.DefaultRetention, "how long the window opened by -accept lasts")
	end := a.fs.Bool("end", false, "end the loss window now")
	if _, err := a.parse(args, "DIR"); err != nil {
		return err
	}
	if *accept && *end {
		fmt.Fprintln(stderr, "idem loss: give -accept or -end, not both")
		a.fs.Usage()
		return errUsage
	}
	s, err := a.openStoreWith(*accept || *end, nil, badgerstore.Options{AcceptLoss: *accept, LossWindow: *window})
	if err != nil {
		return err
	}
	res := lossResult{Dir: a.dir}
	b, ok := s.Backend().(*badgerstore.Backend)
	if ok && *end {
		err = b.EndLossWindow(ctx)
		res.Ended = err == nil
	}
	if ok {
		if w, has := b.LossWindow(); has {
			res.Window = &w
			res.InForce = s.Options().Clock.Now().Before(w.End)
		}
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if a.json {
		return writeJSON(stdout, res)
	}
	return writeLoss(stdout, res)
}

func writeLoss(w io.Writer, r lossResult) error {
	if r.Ended {
		fmt.Fprintln(w, "loss window ended: absent keys run at once again")
	}
	if r.Window == nil {
		_, err := fmt.Fprintf(w, "no loss window in %s\n", r.Dir)
		return err
	}
	state := "ended"
	if r.InForce {
		state = "in force: a claim on an absent key asks the Resolver first"
	}
	fmt.Fprintf(w, "loss window: %s to %s, %s\n", r.Window.Start.Format(time.RFC3339), r.Window.End.Format(time.RFC3339), state)
	fmt.Fprintln(w, "lost:")
	for _, l := range strings.Split(r.Window.Lost, "\n") {
		fmt.Fprintf(w, "  %s\n", l)
	}
	return nil
}
