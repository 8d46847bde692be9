package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/idemkit/idem/backend"
)

const verifyAbout = `
Checks a store directory, which no process may hold: opening it runs the
checks of every open (idem's mark, Badger's MANIFEST and tables, the log),
then every table block, the log, every record's checksum and key, and the
expiry index are read. Prints what is damaged. Exit status 0 when all is
well, 1 when anything is damaged or the store cannot be opened.`

// verifyResult is what -json prints.
type verifyResult struct {
	Dir string `json:"dir"`
	OK  bool   `json:"ok"`
	// OpenError is why the store could not be opened, if it could not.
	OpenError string `json:"open_error,omitempty"`
	*backend.VerifyReport
}

// errDamaged is returned once the damage is printed: exit status 1.
var errDamaged = errors.New("damage found")

func verifyCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("idem verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flagDir := fs.String("dir", "", "the store `directory`, if not given as the argument")
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	setUsage(fs, "DIR [-json]", verifyAbout, "idem verify /var/lib/refund-tool/idem")
	pos, err := parseAnywhere(fs, args)
	if err != nil {
		return err
	}
	dir, _, err := takeDir(fs, *flagDir, pos, []string{"DIR"}, false)
	if err != nil {
		return err
	}
	res := verifyResult{Dir: dir, VerifyReport: &backend.VerifyReport{}}
	s, err := (&adminFlags{dir: dir}).openStore(false, nil)
	if err != nil {
		res.OpenError = err.Error()
	} else {
		defer s.Close()
		r, err := s.Verify(ctx)
		if err != nil {
			return err
		}
		res.VerifyReport = r
	}
	res.OK = res.OpenError == "" && res.VerifyReport.OK()
	if *asJSON {
		if err := writeJSON(stdout, res); err != nil {
			return err
		}
	} else {
		printVerify(stdout, res)
	}
	if !res.OK {
		return errDamaged
	}
	return nil
}

func printVerify(w io.Writer, res verifyResult) {
	if res.OpenError != "" {
		fmt.Fprintf(w, "%s: cannot be opened: %s\n", res.Dir, res.OpenError)
		return
	}
	for _, d := range res.Damage {
		fmt.Fprintf(w, "damaged: %s\n", d)
	}
	verdict := "ok"
	if !res.OK {
		verdict = fmt.Sprintf("%d damaged", len(res.Damage))
	}
	fmt.Fprintf(w, "%s: %d records, %d expiry entries read: %s\n", res.Dir, res.Records, res.Expiries, verdict)
}
