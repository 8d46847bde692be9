package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
)

const backupAbout = `
Writes a backup of the store in DIR to FILE ("-" for standard output):
every record, as one consistent cut (Store.Backup). FILE is written beside
itself and renamed into place once complete and synced, so a cron job
never leaves half a backup under its name. DIR must not be held by a
running process: back a running server up through its admin handler
instead (idemadmin.Handler, GET backup), which serves the same file.`

const restoreAbout = `
Restores the backup in FILE ("-" for standard input) into DIR, which must
be absent or empty. Every chunk of the file is checked before it is
loaded: a foreign, damaged or cut-short file is refused and DIR is left
empty. The restored store gets an identity of its own; the claims that
were in progress at the backup come back orphaned, and the first server
to open it settles them through its Resolver.`

// backupHeldError says how to back up a store a running server holds.
type backupHeldError struct{ dir string }

func (e *backupHeldError) Error() string {
	return fmt.Sprintf(`the store at %s is held by a running process, which locks its directory.
Back it up through that server's admin handler (idemadmin.Handler, with backup access):
  curl -fsS -o FILE https://SERVER/ADMIN-PATH/backup
or stop the server and run this again.`, e.dir)
}

// fileArgs parses the arguments of backup and restore: flags anywhere,
// and the positional arguments names, a FILE and the store's "DIR", which
// -dir may give instead. It returns the store directory and the file.
func fileArgs(name string, names []string, about string, stderr io.Writer, args []string,
	examples ...string) (dir, file string, asJSON bool, err error) {
	fs := flag.NewFlagSet("idem "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	flagDir := fs.String("dir", "", "the store `directory`, if not given as an argument")
	fs.BoolVar(&asJSON, "json", false, "print what the file holds as JSON")
	setUsage(fs, strings.Join(names, " ")+" [-json]", about, examples...)
	pos, err := parseAnywhere(fs, args)
	if err != nil {
		return "", "", false, err
	}
	dir, pos, err = takeDir(fs, *flagDir, pos, names, false)
	if err != nil {
		return "", "", false, err
	}
	return dir, pos[0], asJSON, nil
}

func backupCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	dir, file, asJSON, err := fileArgs("backup", []string{"DIR", "FILE"}, backupAbout, stderr, args,
		"idem backup /var/lib/refund-tool/idem /backups/idem-2026-12-01.backup",
		"idem backup /var/lib/refund-tool/idem - | gzip > idem.backup.gz")
	if err != nil {
		return err
	}
	s, err := (&adminFlags{dir: dir}).openStore(false, nil)
	var held *storeHeldError
	if errors.As(err, &held) {
		return &backupHeldError{dir}
	}
	if err != nil {
		return err
	}
	defer s.Close()
	report := stdout
	var info *backend.BackupInfo
	if file == "-" {
		report = stderr
		info, err = s.Backup(ctx, stdout)
	} else {
		info, err = backupToFile(ctx, s, file)
	}
	if err != nil {
		return err
	}
	return printBackup(report, asJSON, "backed up", dir, file, info)
}

// backupToFile writes the backup to a temporary file beside file, syncs
// it, and renames it into place.
func backupToFile(ctx context.Context, s *idem.Store, file string) (*backend.BackupInfo, error) {
	f, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*.tmp")
	if err != nil {
		return nil, err
	}
	info, err := s.Backup(ctx, f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), file)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return nil, err
	}
	if d, err := os.Open(filepath.Dir(file)); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return nil, err
		}
	}
	return info, nil
}

func restoreCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	dir, file, asJSON, err := fileArgs("restore", []string{"FILE", "DIR"}, restoreAbout, stderr, args,
		"idem restore /backups/idem-2026-12-01.backup /var/lib/refund-tool/idem.restored")
	if err != nil {
		return err
	}
	var r io.Reader = os.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	info, err := badgerstore.Restore(ctx, r, dir, badgerstore.Options{})
	if errors.Is(err, idem.ErrCorrupt) {
		return fmt.Errorf("%s is not a whole idem backup, nothing restored: %w", file, err)
	}
	if err != nil {
		return err
	}
	return printBackup(stdout, asJSON, "restored", dir, file, info)
}

// printBackup reports a backup or a restore.
func printBackup(w io.Writer, asJSON bool, verb, dir, file string, info *backend.BackupInfo) error {
	if asJSON {
		return writeJSON(w, info)
	}
	store := info.Store
	if store == "" {
		store = "(no identity)"
	}
	_, err := fmt.Fprintf(w, "%s store %s (%s, taken %s): %s, %d bytes, sha256 %s\n",
		verb, store, dir, info.Time.Format(time.RFC3339), file, info.Bytes, info.SHA256)
	return err
}
