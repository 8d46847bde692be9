package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
)

// The torture's downstream world. An effect is one line "key token size\n"
// appended to the ledger file and synced before Do's function returns: the
// ledger is the truth the Resolver reads (an orphaned claim is committed iff
// its key's line carries the claim's token), and the truth the parent
// checks every store against. The result of key's effect under token is
// derived from the two (tortureBody), so the Resolver hands back exactly the
// bytes the dead child would have saved.
const (
	tortureScope       = "torture"
	tortureFingerprint = "torture-v1"
	tortureKeyPrefix   = "t-"
)

func tortureKey(i int) string { return tortureKeyPrefix + strconv.Itoa(i) }

func tortureIndex(key string) (int, bool) {
	if !strings.HasPrefix(key, tortureKeyPrefix) {
		return 0, false
	}
	n, err := strconv.Atoi(key[len(tortureKeyPrefix):])
	return n, err == nil && n >= 0
}

func tortureRequest(key string) idem.Request {
	return idem.Request{Scope: tortureScope, Key: key, Fingerprint: tortureFingerprint}
}

// tortureBody is the result of key's effect under token: "key:token:" and
// pseudo-random bytes, mostly a few hundred of them, one in 32 over 16 KiB
// (those go to Badger's value log).
func tortureBody(key string, token uint64) []byte {
	h := fnv.New64a()
	_, _ = io.WriteString(h, key)
	rng := rand.New(rand.NewPCG(h.Sum64(), token))
	n := 32 + rng.IntN(480)
	if rng.IntN(32) == 0 {
		n = 16<<10 + rng.IntN(8<<10)
	}
	b := make([]byte, 0, n+len(key)+24)
	b = fmt.Appendf(b, "%s:%d:", key, token)
	for len(b) < cap(b) {
		b = append(b, byte(rng.Uint32()))
	}
	return b
}

func tortureResult(key string, token uint64) idem.Result {
	return idem.Result{Status: 200, Body: tortureBody(key, token)}
}

// ledgerLine is one booked effect.
type ledgerLine struct {
	token uint64
	size  int
	// sum is the SHA-256 of the effect's result; only the parent's index
	// fills it in.
	sum [32]byte
}

// parseLedgerLine parses one line (without its newline). With check set it
// also derives the result, checks the size against it and fills in sum.
func parseLedgerLine(s string, check bool) (string, ledgerLine, error) {
	var l ledgerLine
	f := strings.Fields(s)
	if len(f) != 3 {
		return "", l, fmt.Errorf("ledger line %q: want 3 fields", s)
	}
	key := f[0]
	token, err1 := strconv.ParseUint(f[1], 10, 64)
	size, err2 := strconv.Atoi(f[2])
	if _, ok := tortureIndex(key); !ok || err1 != nil || err2 != nil {
		return "", l, fmt.Errorf("ledger line %q: bad key, token or size", s)
	}
	l.token, l.size = token, size
	if check {
		body := tortureBody(key, token)
		if len(body) != size {
			return "", l, fmt.Errorf("ledger line %q: size %d, the result has %d bytes", s, size, len(body))
		}
		l.sum = sha256.Sum256(body)
	}
	return key, l, nil
}

// ledgerIndex is the ledger as read so far: every key's booked effects.
// It is read incrementally, between children, by the parent.
type ledgerIndex struct {
	path  string
	off   int64 // bytes parsed so far
	lines map[string][]ledgerLine
	total int
	next  int // one past the highest key index booked
}

func newLedgerIndex(path string) *ledgerIndex {
	return &ledgerIndex{path: path, lines: map[string][]ledgerLine{}}
}

// catchUp parses what was appended since the last call. No child may run.
// An unterminated last line is an effect the kill interrupted before its
// sync returned, so before Do's function could return: the downstream never
// finished it, and it is cut off. It returns the keys of the new lines, and
// those booked a second time.
func (l *ledgerIndex) catchUp() (added, dups []string, err error) {
	f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if _, err := f.Seek(l.off, io.SeekStart); err != nil {
		return nil, nil, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, err
	}
	n := bytes.LastIndexByte(data, '\n') + 1
	if n < len(data) {
		if err := f.Truncate(l.off + int64(n)); err != nil {
			return nil, nil, err
		}
		if err := f.Sync(); err != nil {
			return nil, nil, err
		}
	}
	for _, s := range strings.SplitAfter(string(data[:n]), "\n") {
		if s == "" {
			continue
		}
		key, line, err := parseLedgerLine(strings.TrimSuffix(s, "\n"), true)
		if err != nil {
			return added, dups, err
		}
		l.lines[key] = append(l.lines[key], line)
		l.total++
		added = append(added, key)
		if i, _ := tortureIndex(key); i >= l.next {
			l.next = i + 1
		}
		if len(l.lines[key]) == 2 {
			dups = append(dups, key)
		}
	}
	l.off += int64(n)
	return added, dups, nil
}

// ledgerResolver decides stale claims from a ledger: committed with the
// derived result when the key's line carries the claim's token, not
// committed when the key has no line. A line with another token means an
// earlier claim's effect was booked and yet a later claim exists: the
// resolver refuses to answer and reports it.
type ledgerResolver struct {
	// mu guards lines (the child adds its own effects to it while it
	// resolves) and the counts.
	mu                      sync.Mutex
	lines                   map[string][]ledgerLine
	committed, notCommitted int
	problems                []string
	onVerdict               func(key string, committed bool)
}

var errImpossibleClaim = errors.New("torture: a claim exists for a key whose effect an earlier claim booked")

func (r *ledgerResolver) Resolve(_ context.Context, rec *idem.Record) (idem.Resolution, error) {
	r.mu.Lock()
	lines := r.lines[rec.Key]
	var res idem.Resolution
	var err error
	switch {
	case rec.Scope != tortureScope:
		err = fmt.Errorf("torture: stale claim in scope %q", rec.Scope)
	case len(lines) == 0:
		r.notCommitted++
		res.Verdict = idem.VerdictNotCommitted
	case len(lines) == 1 && lines[0].token == rec.Token:
		r.committed++
		res = idem.Resolution{Verdict: idem.VerdictCommitted, Result: tortureResult(rec.Key, rec.Token)}
	default:
		err = fmt.Errorf("%w: %s/%d, ledger %v", errImpossibleClaim, rec.Key, rec.Token, lines)
	}
	if err != nil {
		r.problems = append(r.problems, err.Error())
	}
	r.mu.Unlock()
	if err == nil && r.onVerdict != nil {
		r.onVerdict(rec.Key, res.Verdict == idem.VerdictCommitted)
	}
	return res, err
}

func (r *ledgerResolver) add(key string, l ledgerLine) {
	r.mu.Lock()
	r.lines[key] = append(r.lines[key], l)
	r.mu.Unlock()
}

// verifyStats counts what the parent's checks did.
type verifyStats struct {
	// Orphans names the claims found open after the kill, as "key/token".
	Orphans                          []string
	Committed, NotCommitted, Replays int
}

// verifyInput is what the parent's check works on.
type verifyInput struct {
	Dir    string
	Ledger map[string][]ledgerLine
	Acks   map[string][32]byte
	// Check names the keys whose records are checked (beside the open
	// claims); Replay the acknowledged keys Do must replay.
	Check, Replay []string
	// Full checks every record (a scan) and replays every acknowledged
	// key instead.
	Full bool
	// Recover has the check settle the orphans through the Resolver and
	// then require that none is left; without it they are checked and left
	// for the next child's own recovery, under its traffic.
	Recover bool
}

// farFuture makes Backend.Stale list every open claim.
const farFuture = 24 * time.Hour

// verifyStore is the parent's check after a child died. It opens the store
// with a Resolver over the ledger and checks that every open claim was
// orphaned by the restart; with in.Recover it settles them through the
// Resolver and checks (c) that none is left. It checks that the records of
// in.Check (or all, with in.Full) agree with the ledger (a booked effect is
// done with its own result, nothing else is done) and that acknowledged
// keys' records and ledger lines hold the acknowledged bytes; and (b) that
// Do replays each key of in.Replay (or every acknowledged key, with
// in.Full) with the acknowledged bytes, running nothing. It returns the
// violations.
func verifyStore(ctx context.Context, in verifyInput, st *verifyStats) (v []string, err error) {
	res := &ledgerResolver{lines: in.Ledger}
	s, err := openRecovering(in.Dir, &idem.Options{Lease: tortureLease, SweepInterval: -1, Resolver: res})
	if err != nil {
		return []string{fmt.Sprintf("the store does not reopen after the kill: %v", err)}, nil
	}
	defer func() {
		if cerr := s.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	bad := func(format string, args ...any) { v = append(v, fmt.Sprintf(format, args...)) }
	open, err := s.Backend().Stale(ctx, time.Now().Add(farFuture), 1<<20)
	if err != nil {
		return v, fmt.Errorf("open claims: %w", err)
	}
	check := append([]string(nil), in.Check...)
	for _, rec := range open {
		st.Orphans = append(st.Orphans, fmt.Sprintf("%s/%d", rec.Key, rec.Token))
		check = append(check, rec.Key)
	}
	if in.Recover {
		if err := recoverOrphans(ctx, s, res, st, bad); err != nil {
			return v, err
		}
	}
	if in.Full {
		err = checkAll(ctx, s, in, bad)
	} else {
		err = checkKeys(ctx, s, in, check, bad)
	}
	if err != nil {
		return v, err
	}
	replay := in.Replay
	if in.Full {
		replay = slices.Sorted(maps.Keys(in.Acks))
	}
	for _, key := range replay {
		v = append(v, replayAcked(ctx, s, key, in.Acks[key])...)
		st.Replays++
	}
	return v, nil
}

// recoverOrphans settles every open claim through the Resolver and checks
// that none is left open.
func recoverOrphans(ctx context.Context, s *idem.Store, res *ledgerResolver, st *verifyStats, bad func(string, ...any)) error {
	rep, err := s.Sweep(ctx)
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	st.Committed += res.committed
	st.NotCommitted += res.notCommitted
	if rep.Stale != rep.Committed+rep.NotCommitted || rep.Unknown+rep.Attention+rep.Unresolved > 0 {
		bad("recovery left claims unsettled: %+v", rep)
	}
	for _, p := range res.problems {
		bad("resolver: %s", p)
	}
	left, err := s.Backend().Stale(ctx, time.Now().Add(farFuture), 1<<20)
	if err != nil {
		return fmt.Errorf("open claims: %w", err)
	}
	for _, rec := range left {
		bad("%s/%d left in progress after recovery", rec.Key, rec.Token)
	}
	return nil
}

// checkKeys checks the records of keys, and the ledger lines of those
// acknowledged.
func checkKeys(ctx context.Context, s *idem.Store, in verifyInput, keys []string, bad func(string, ...any)) error {
	done := map[string]bool{}
	for _, key := range keys {
		if done[key] {
			continue
		}
		done[key] = true
		rec, err := s.Get(ctx, tortureScope, key)
		switch {
		case errors.Is(err, idem.ErrNotFound):
			rec = nil
		case err != nil:
			return fmt.Errorf("get %s: %w", key, err)
		}
		checkPresence(key, rec != nil, in, bad)
		if rec != nil {
			for _, p := range checkRecord(rec, in.Ledger[key], in.Acks, !in.Recover) {
				bad("%s", p)
			}
		}
	}
	return nil
}

// checkAll checks every record, and that every booked or acknowledged key
// has one.
func checkAll(ctx context.Context, s *idem.Store, in verifyInput, bad func(string, ...any)) error {
	seen := map[string]bool{}
	err := s.Backend().(backend.Lister).Scan(ctx, func(rec *idem.Record) bool {
		if rec.Scope != tortureScope {
			return true
		}
		seen[rec.Key] = true
		for _, p := range checkRecord(rec, in.Ledger[rec.Key], in.Acks, !in.Recover) {
			bad("%s", p)
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	for key := range in.Ledger {
		if _, acked := in.Acks[key]; !acked {
			checkPresence(key, seen[key], in, bad)
		}
	}
	for key := range in.Acks {
		checkPresence(key, seen[key], in, bad)
	}
	return nil
}

// checkPresence checks that a booked or acknowledged key has a record, and
// that an acknowledged key's ledger line holds the acknowledged result.
func checkPresence(key string, found bool, in verifyInput, bad func(string, ...any)) {
	ack, acked := in.Acks[key]
	if !found && len(in.Ledger[key]) > 0 {
		bad("%s: its effect is booked but the store has no record", key)
	}
	if !found && acked {
		bad("%s: acknowledged, but the store has no record", key)
	}
	if l := in.Ledger[key]; acked && (len(l) == 0 || l[0].sum != ack) {
		bad("%s: acknowledged, but the ledger does not hold the acknowledged result", key)
	}
}

// checkRecord compares one record with its key's ledger lines and
// acknowledgement. With orphans set, a claim left open is allowed if the
// restart orphaned it (no lease) and the ledger holds no other claim's
// effect for its key.
func checkRecord(rec *idem.Record, lines []ledgerLine, acks map[string][32]byte, orphans bool) []string {
	var v []string
	ack, acked := acks[rec.Key]
	var sum [32]byte
	if rec.Result != nil {
		sum = sha256.Sum256(rec.Result.Body)
	}
	switch {
	case orphans && rec.State == idem.StateInProgress && !rec.Attention:
		if !rec.LeaseEnds.IsZero() {
			v = append(v, fmt.Sprintf("%s/%d: the claim survived the restart with a lease to %s", rec.Key, rec.Token, rec.LeaseEnds))
		}
		if len(lines) > 0 && (len(lines) > 1 || lines[0].token != rec.Token) {
			v = append(v, fmt.Sprintf("%s/%d: claim open, but an earlier claim's effect is booked (token %d)", rec.Key, rec.Token, lines[0].token))
		}
	case rec.State == idem.StateInProgress || rec.Attention:
		v = append(v, fmt.Sprintf("%s/%d left %s (attention %v) after recovery", rec.Key, rec.Token, rec.State, rec.Attention))
	case len(lines) == 0 && rec.State == idem.StateDone:
		v = append(v, fmt.Sprintf("%s is done with no effect booked", rec.Key))
	case len(lines) > 0 && rec.State != idem.StateDone:
		v = append(v, fmt.Sprintf("%s: effect booked with token %d, but the record is %s", rec.Key, lines[0].token, rec.State))
	case len(lines) > 0 && (rec.Token != lines[0].token || rec.Result == nil || sum != lines[0].sum):
		v = append(v, fmt.Sprintf("%s: effect booked with token %d, but the record holds token %d and another result", rec.Key, lines[0].token, rec.Token))
	}
	if acked && (rec.State != idem.StateDone || rec.Result == nil || sum != ack) {
		v = append(v, fmt.Sprintf("%s: acknowledged, but the record (%s) does not hold the acknowledged result", rec.Key, rec.State))
	}
	return v
}

// replayAcked asks Do for an acknowledged key with a function that must not
// run: Do must replay the acknowledged bytes.
func replayAcked(ctx context.Context, s *idem.Store, key string, ack [32]byte) []string {
	ran := false
	res, replayed, err := s.Do(ctx, tortureRequest(key), func(context.Context) (idem.Result, error) {
		ran = true
		return idem.Result{}, errors.New("torture: an acknowledged key ran again")
	})
	switch {
	case ran:
		return []string{fmt.Sprintf("%s: acknowledged, but Do ran its effect again", key)}
	case err != nil:
		return []string{fmt.Sprintf("%s: acknowledged, but Do returned %v", key, err)}
	case !replayed || sha256.Sum256(res.Body) != ack:
		return []string{fmt.Sprintf("%s: acknowledged, but Do returned another result (replayed %v)", key, replayed)}
	}
	return nil
}

// openRecovering opens a store and turns a panic inside Open into an
// error: a store that panics when reopened after a kill is a violation to
// report with the rest, not the end of the torture.
func openRecovering(dir string, opts *idem.Options) (s *idem.Store, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("open panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return idem.Open(dir, opts)
}
