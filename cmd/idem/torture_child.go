package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
)

// tortureChildEnv carries a child's configuration (JSON) from the parent;
// a process with it set is a torture child.
const tortureChildEnv = "IDEM_TORTURE_CHILD"

// tortureLease is every store's lease in the torture: long, so that a live
// claim never goes stale on a slow machine (the Resolver would then decide a
// claim whose effect is still running). Orphans of a killed child are stale
// at once after the restart, whatever the lease.
const tortureLease = 2 * time.Minute

// tortureChildConfig is what the parent tells a child.
type tortureChildConfig struct {
	Dir, Ledger string
	Workers     int
	// Window is how many of the latest keys a repeat draws from; Base is
	// the first fresh key (every key below it was used by earlier children).
	Window, Base int
	Seed         uint64
	// Lifetime bounds a child whose parent died without killing it.
	Lifetime time.Duration
}

// The child's report lines, one write each on its report pipe (fd 3). A line
// the parent did not get whole, because the kill came first, does not count:
// an acknowledgement is a line "a key x|r sha256hex", written only after
// Do returned the result to the child.
const (
	reportOpened    = 'o' // "o": the store is open
	reportAck       = 'a' // "a key x|r sum": Do returned a result, executed (x) or replayed (r)
	reportFailed    = 'f' // "f key": the effect failed (injected) and Do released the claim
	reportBusy      = 'b' // "b key": another goroutine held the key (ErrInProgress)
	reportUnknown   = 'u' // "u key": ErrOutcomeUnknown
	reportResolved  = 'c' // "c key 1|0": the child's Resolver settled an orphan, committed or not
	reportViolation = 'v' // "v text": something the torture forbids
)

var errTortureEffect = errors.New("torture: the effect failed downstream (injected)")

// tortureReporter writes report lines, each with one write: a pipe write of
// under 4 KiB is atomic, so the parent gets whole lines or nothing.
type tortureReporter struct {
	mu sync.Mutex // serializes writes
	w  io.Writer
}

func (r *tortureReporter) line(format string, args ...any) {
	b := fmt.Appendf(nil, format+"\n", args...)
	r.mu.Lock()
	_, err := r.w.Write(b)
	r.mu.Unlock()
	if err != nil {
		// The parent is gone: nobody will kill this child.
		os.Exit(3)
	}
}

// tortureChild is a running child: its store, ledger and workers.
type tortureChild struct {
	cfg    tortureChildConfig
	store  *idem.Store
	ledger *os.File
	res    *ledgerResolver
	rep    *tortureReporter
	next   atomic.Int64 // the next fresh key
}

// runTortureChild is a child's life: open the store over the ledger, then
// run Do on Workers goroutines until killed.
func runTortureChild(ctx context.Context, cfg tortureChildConfig, report io.Writer, stderr io.Writer) error {
	c := &tortureChild{cfg: cfg, rep: &tortureReporter{w: report}}
	c.next.Store(int64(cfg.Base))
	lines, err := readLedgerLines(cfg.Ledger)
	if err != nil {
		return err
	}
	c.res = &ledgerResolver{lines: lines, onVerdict: func(key string, committed bool) {
		b := 0
		if committed {
			b = 1
		}
		c.rep.line("%c %s %d", reportResolved, key, b)
	}}
	if c.ledger, err = os.OpenFile(cfg.Ledger, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err != nil {
		return err
	}
	c.store, err = idem.Open(cfg.Dir, &idem.Options{
		Durability:    idem.Durable,
		Lease:         tortureLease,
		SweepInterval: 200 * time.Millisecond, // recovery runs beside the traffic
		Resolver:      c.res,
		Logger:        slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		c.rep.line("%c open: %s", reportViolation, oneLine(err))
		return err
	}
	c.rep.line("%c", reportOpened)
	ctx, cancel := context.WithTimeout(ctx, cfg.Lifetime)
	defer cancel()
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(w)))
		wg.Go(func() {
			for ctx.Err() == nil {
				c.call(ctx, rng)
			}
		})
	}
	wg.Wait()
	return c.store.Close()
}

// call makes one Do: a fresh key or a repeat of a recent one.
func (c *tortureChild) call(ctx context.Context, rng *rand.Rand) {
	next := int(c.next.Load())
	var i int
	if low := max(next-c.cfg.Window, 0); next > low && rng.IntN(5) < 3 {
		i = low + rng.IntN(next-low)
	} else {
		i = int(c.next.Add(1) - 1)
	}
	key := tortureKey(i)
	fail := rng.IntN(12) == 0
	res, replayed, err := c.store.Do(ctx, tortureRequest(key), func(ctx context.Context) (idem.Result, error) {
		return c.effect(ctx, key, fail)
	})
	switch {
	case err == nil:
		if !strings.HasPrefix(string(res.Body), key+":") {
			c.rep.line("%c %s: Do returned another key's result %.40q", reportViolation, key, res.Body)
		}
		how := 'x'
		if replayed {
			how = 'r'
		}
		sum := sha256.Sum256(res.Body)
		c.rep.line("%c %s %c %s", reportAck, key, how, hex.EncodeToString(sum[:]))
	case errors.Is(err, errTortureEffect):
		c.rep.line("%c %s", reportFailed, key)
	case errors.Is(err, idem.ErrInProgress):
		c.rep.line("%c %s", reportBusy, key)
	case errors.Is(err, idem.ErrOutcomeUnknown):
		c.rep.line("%c %s", reportUnknown, key)
	case ctx.Err() != nil:
	default:
		c.rep.line("%c %s: Do: %s", reportViolation, key, oneLine(err))
	}
}

// effect books key's effect under its claim's token, synced, or fails
// without booking anything.
func (c *tortureChild) effect(ctx context.Context, key string, fail bool) (idem.Result, error) {
	claim, ok := idem.ClaimFromContext(ctx)
	if !ok {
		c.rep.line("%c %s: no claim in the effect's context", reportViolation, key)
		return idem.Result{}, idem.ErrNoClaim
	}
	if fail {
		return idem.Result{}, errTortureEffect
	}
	token := claim.Token()
	body := tortureBody(key, token)
	if _, err := fmt.Fprintf(c.ledger, "%s %d %d\n", key, token, len(body)); err != nil {
		return idem.Result{}, err
	}
	if err := c.ledger.Sync(); err != nil {
		return idem.Result{}, err
	}
	c.res.add(key, ledgerLine{token: token, size: len(body)})
	return idem.Result{Status: 200, Body: body}, nil
}

// readLedgerLines reads the ledger for a child's Resolver. The parent cut
// any torn tail before it started the child.
func readLedgerLines(path string) (map[string][]ledgerLine, error) {
	lines := map[string][]ledgerLine{}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return lines, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, l, err := parseLedgerLine(sc.Text(), false)
		if err != nil {
			return nil, err
		}
		lines[key] = append(lines[key], l)
	}
	return lines, sc.Err()
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }
