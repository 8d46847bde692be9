package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/internal/badger"
)

// The operator's subcommands (inspect, ls, stats, sweep, export) share
// this: flags, opening a store directory, progress on long scans, and
// output as a table or JSON. The views themselves are idemadmin's, the
// same a running server offers through idemadmin.Handler.

// adminFlags are the flags every operator subcommand takes.
type adminFlags struct {
	fs   *flag.FlagSet
	dir  string // the store directory: -dir, or the first argument
	json bool
	now  string // hidden: a fixed "now", for tests and reproducible output
	keys string // the key files (keys.go)
}

// newAdminFlags returns a flag set for subcommand name, with the flags
// every operator command takes; synopsis, about and the examples are
// printed by -h around the flags.
func newAdminFlags(name, synopsis, about string, stderr io.Writer, examples ...string) *adminFlags {
	a := &adminFlags{fs: flag.NewFlagSet("idem "+name, flag.ContinueOnError)}
	a.fs.SetOutput(stderr)
	a.fs.StringVar(&a.dir, "dir", "", "the store `directory`, if not given as the first argument")
	a.fs.BoolVar(&a.json, "json", false, "print JSON instead of a table")
	a.fs.StringVar(&a.keys, "keys", "", keysUsage)
	a.fs.StringVar(&a.now, "now", "", "judge records as of this RFC 3339 time instead of the clock (hidden)")
	setUsage(a.fs, synopsis, about, examples...)
	return a
}

// parse parses args, flags and positional arguments in any order. names
// are the positional arguments the command takes, the first "DIR", the
// store directory, which -dir may give instead; parse sets a.dir and
// returns the others. It prints why and returns errUsage on bad usage,
// including a missing directory, and flag.ErrHelp after printing the
// usage that -h asked for.
func (a *adminFlags) parse(args []string, names ...string) ([]string, error) {
	pos, err := parseAnywhere(a.fs, args)
	if err != nil {
		return nil, err
	}
	if a.dir, pos, err = takeDir(a.fs, a.dir, pos, names, false); err != nil {
		return nil, err
	}
	if a.keys == "" {
		a.keys = os.Getenv(keysEnv)
	}
	if a.now != "" {
		if _, err := time.Parse(time.RFC3339, a.now); err != nil {
			fmt.Fprintf(a.fs.Output(), "%s: -now %q: want an RFC 3339 time\n", a.fs.Name(), a.now)
			return nil, errUsage
		}
	}
	return pos, nil
}

// clock is the store's clock: fixed when -now is given.
func (a *adminFlags) clock() idem.Clock {
	if a.now == "" {
		return idem.SystemClock()
	}
	t, _ := time.Parse(time.RFC3339, a.now) // checked by parse
	return fixedClock{t.UTC()}
}

// fixedClock reads one time forever; the command line never waits on it.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time                         { return c.t }
func (c fixedClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// storeHeldError is returned when a running process holds the directory.
type storeHeldError struct{ dir string }

func (e *storeHeldError) Error() string {
	return fmt.Sprintf(`the store at %s is held by a running process: Badger locks its directory while a server has it open.
Use that server's admin handler instead (idemadmin.Handler: GET inspect, ls, stats and export, POST sweep),
or stop the server and run this again.`, e.dir)
}

// uncleanStoreError is returned when a read-only open finds a log that the
// process before did not close: Badger must repair it, which needs write
// access.
type uncleanStoreError struct{ dir string }

func (e *uncleanStoreError) Error() string {
	return fmt.Sprintf(`the store at %s was not closed cleanly: the process that held it crashed or was killed,
and its logs hold writes that must be applied before the store can be read, which a read-only
open cannot do.
Run "idem sweep %s" once (it opens the store for writing, marks the dead process's open claims
as orphaned and reports them), or start the server again; then run this again.`, e.dir, e.dir)
}

// openStore opens the store in a.dir (or on the Redis server a redis://
// URL there names) for an operator's command:
// read-only unless write is set, with no background sweep, and with obs
// as its observer. A running server's lock and an unclean log give errors
// that say what to do.
func (a *adminFlags) openStore(write bool, obs idem.Observer) (*idem.Store, error) {
	return a.openStoreWith(write, obs, badgerstore.Options{})
}

// openStoreWith is openStore with Badger options of the command's (such
// as AcceptLoss); ReadOnly is set from write.
func (a *adminFlags) openStoreWith(write bool, obs idem.Observer, bo badgerstore.Options) (*idem.Store, error) {
	if isRedisURL(a.dir) {
		return a.openRedis(write, obs) // admin_redis.go
	}
	dir := a.dir
	if _, err := os.Stat(filepath.Join(dir, "MANIFEST")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no idem store at %s (no Badger MANIFEST there)", dir)
		}
		return nil, err
	}
	keys, err := loadKeys(context.Background(), a.keys)
	if err != nil {
		return nil, err
	}
	bo.ReadOnly = !write
	b, err := badgerstore.Open(dir, bo)
	var s *idem.Store
	if err == nil {
		s = idem.New(b, &idem.Options{
			SweepInterval: -1,
			Clock:         a.clock(),
			Observer:      obs,
			CloseTimeout:  time.Second,
			Keys:          keys,
		})
	}
	switch {
	case err == nil:
		return s, nil
	case dirLocked(dir) || strings.Contains(err.Error(), "Another process is using this Badger database"):
		return nil, &storeHeldError{dir}
	case !write && (errors.Is(err, badgerstore.ErrUnclean) || strings.Contains(err.Error(), badger.ErrTruncateNeeded.Error())):
		return nil, &uncleanStoreError{dir}
	}
	return nil, err
}

// writeJSON prints v indented.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// scanCounter shows how many records a long scan has read, on a
// terminal: "\rscanned 12345 records" every 100 ms, cleared at the end. A
// nil *scanCounter counts nothing, so callers need no checks.
type scanCounter struct {
	w    io.Writer
	verb string
	n    atomic.Int64
	stop chan struct{}
	wg   sync.WaitGroup
	// stopTick stops the ticker feeding the drawing goroutine, if any.
	stopTick func()
}

// newScanCounter starts counting to stderr if it is a terminal.
func newScanCounter(stderr io.Writer, verb string) *scanCounter {
	f, ok := stderr.(*os.File)
	if !ok || !isTerminal(f) {
		return nil
	}
	t := time.NewTicker(100 * time.Millisecond)
	c := startScanCounter(stderr, verb, t.C)
	c.stopTick = t.Stop
	return c
}

// startScanCounter draws the count to w at every tick.
func startScanCounter(w io.Writer, verb string, tick <-chan time.Time) *scanCounter {
	c := &scanCounter{w: w, verb: verb, stop: make(chan struct{})}
	c.wg.Go(func() {
		for {
			select {
			case <-c.stop:
				return
			case <-tick:
				fmt.Fprintf(c.w, "\r%s %d records", c.verb, c.n.Load())
			}
		}
	})
	return c
}

// progress is the callback idemadmin's scans take; nil when not counting.
func (c *scanCounter) progress() func(int) {
	if c == nil {
		return nil
	}
	return func(n int) { c.n.Store(int64(n)) }
}

// finish stops drawing and clears the line.
func (c *scanCounter) finish() {
	if c == nil {
		return
	}
	close(c.stop)
	c.wg.Wait()
	if c.stopTick != nil {
		c.stopTick()
	}
	fmt.Fprint(c.w, "\r\033[K")
}
