package pgstore_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/pgstore"
	"github.com/stretchr/testify/require"
)

// ledgerRow is one execution of an effect, as the ledger saw it.
type ledgerRow struct {
	executor string
	token    uint64
	at       time.Time // when PostgreSQL ran the INSERT
}

func (r ledgerRow) body() string { return string(effectResult(r.executor, r.token).Body) }

// nemesisFindings is what the checks found, counted.
type nemesisFindings struct {
	keys, effects int
	twice         []string // keys whose effect ran more than once
	// twiceSeen are the keys of twice where an execution that is not the
	// key's result reported its write succeeded: Do knew it ran late.
	// The rest, twice unseen, are keys where every such execution's write
	// failed as far as its worker knew (it landed later, from a held
	// network path) or its worker was killed before it could say: no
	// process learned that it ran.
	twiceSeen            []string
	releasedButCommitted []string // an effect ran, and the record is not done
	doneWithoutEffect    []string // done, yet no ledger row
	disagree             []string // done with a result no ledger row gives
	acksVerified         int
	acksBroken           []string // an acknowledged result that does not replay
	inProgress           int      // after the final sweep
	ledger               map[string][]ledgerRow
}

// check runs the final recovery sweep, as an instance an hour on would
// (every lease and grace over, every worker gone), then the invariants.
func (n *nemesis) check() {
	t := n.t
	n.mu.Lock()
	for _, f := range n.failures {
		t.Errorf("a worker ended on its own: %s", f)
	}
	require.Empty(t, n.ackClashes, "a key was acknowledged with two different results")
	n.mu.Unlock()

	b, err := pgstore.New(ctx, n.admin, &pgstore.Options{Schema: n.cfg.schema, Table: n.cfg.table})
	require.NoError(t, err)
	s := idem.New(b, &idem.Options{Clock: idemtest.NewClock(time.Now().Add(time.Hour)), Lease: n.cfg.lease,
		SweepInterval: -1, Resolver: ledgerResolver(n.admin, n.cfg.ledger)})
	defer s.Close()
	var swept idem.SweepReport
	for range 20 {
		rep, err := s.Sweep(ctx)
		require.NoError(t, err)
		swept.Stale += rep.Stale
		swept.Committed += rep.Committed
		swept.NotCommitted += rep.NotCommitted
		if rep.Stale == 0 {
			break
		}
	}

	f := n.findings(s, b.Table())
	n.report(s, f, swept)
	require.Zero(t, f.inProgress, "claims left in progress after the final recovery sweep")
	require.Empty(t, f.acksBroken, "acknowledged results that do not replay")
	require.Empty(t, f.doneWithoutEffect, "done records whose effect never ran")
	require.Empty(t, f.disagree, "done records whose result no execution gave")
	require.GreaterOrEqual(t, f.acksVerified, minAckedKeys, "too few results acknowledged: the run proves little")
	if n.cfg.mode == modeTx {
		require.Empty(t, f.twice, "transactional effects that ran twice")
		require.Empty(t, f.releasedButCommitted, "transactional effects that ran, recorded as not done")
		return
	}
	if len(f.twice) == 0 {
		return
	}
	n.checkMarked(s, f)
}

// findings reads the ledger and the records, and replays every
// acknowledged key through s with an effect that must not run.
func (n *nemesis) findings(s *idem.Store, table string) nemesisFindings {
	t := n.t
	var f nemesisFindings
	rows, err := n.admin.Query(ctx, "SELECT key, executor, token, at FROM "+n.cfg.ledger)
	require.NoError(t, err)
	ledger := map[string][]ledgerRow{}
	for rows.Next() {
		var k string
		var r ledgerRow
		var tok int64
		require.NoError(t, rows.Scan(&k, &r.executor, &tok, &r.at))
		r.token = uint64(tok)
		ledger[k] = append(ledger[k], r)
		f.effects++
	}
	require.NoError(t, rows.Err())

	rows, err = n.admin.Query(ctx, "SELECT key, state FROM "+table+" WHERE scope = $1", nemesisScope)
	require.NoError(t, err)
	state := map[string]int{}
	for rows.Next() {
		var k string
		var st int
		require.NoError(t, rows.Scan(&k, &st))
		state[k] = st
	}
	require.NoError(t, rows.Err())
	f.keys = len(state)

	for k, rs := range ledger {
		if len(rs) > 1 {
			f.twice = append(f.twice, k)
		}
		if state[k] != int(idem.StateDone) {
			f.releasedButCommitted = append(f.releasedButCommitted, k)
		}
	}
	for k, st := range state {
		switch st {
		case int(idem.StateInProgress):
			f.inProgress++
			continue
		case int(idem.StateDone):
		default:
			continue
		}
		rec, err := s.Get(ctx, nemesisScope, k)
		require.NoError(t, err)
		if len(ledger[k]) == 0 {
			f.doneWithoutEffect = append(f.doneWithoutEffect, k)
			continue
		}
		if !gaveResult(ledger[k], rec.Result) {
			f.disagree = append(f.disagree, fmt.Sprintf("%s: %+v, ledger %v", k, rec.Result, ledger[k]))
		}
	}

	n.mu.Lock()
	acks := n.acks
	n.mu.Unlock()
	for k, body := range acks {
		res, replayed, err := s.Do(ctx, idem.Request{Scope: nemesisScope, Key: k, Fingerprint: "fp"},
			func(context.Context) (idem.Result, error) {
				return idem.Result{Status: 599}, fmt.Errorf("the acknowledged key %s ran again", k)
			})
		if err != nil || !replayed || string(res.Body) != body {
			f.acksBroken = append(f.acksBroken, fmt.Sprintf("%s: acked %s, then replayed=%v %q %v", k, body, replayed, res.Body, err))
			continue
		}
		f.acksVerified++
	}
	sort.Strings(f.twice)
	sort.Strings(f.releasedButCommitted)
	f.twiceSeen = n.seen(s, f.twice, ledger)
	f.ledger = ledger
	return f
}

// seen returns the keys of twice where an execution that is not the
// key's recorded result was reported by its worker as a successful write.
func (n *nemesis) seen(s *idem.Store, twice []string, ledger map[string][]ledgerRow) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, k := range twice {
		rec, err := s.Get(ctx, nemesisScope, k)
		require.NoError(n.t, err)
		recorded := ""
		if rec.Result != nil {
			recorded = string(rec.Result.Body)
		}
		known := false
		for _, r := range ledger[k] {
			if r.body() == recorded {
				continue
			}
			for _, e := range n.effects[k] {
				if e.executor == r.executor && e.token == r.token && e.fnOK {
					known = true
				}
			}
		}
		if known {
			out = append(out, k)
		}
	}
	return out
}

func gaveResult(rows []ledgerRow, res *idem.Result) bool {
	if res == nil {
		return false
	}
	for _, r := range rows {
		if r.body() == string(res.Body) {
			return true
		}
	}
	return false
}

// story is what the workers said about a key's executions, for failures.
func (n *nemesis) story(key string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var parts []string
	for _, e := range n.effects[key] {
		parts = append(parts, e.String())
	}
	return strings.Join(parts, "; ")
}

// report logs the run's numbers.
func (n *nemesis) report(s *idem.Store, f nemesisFindings, swept idem.SweepReport) {
	n.mu.Lock()
	totals := map[string]int64{}
	for _, m := range n.stats {
		for k, v := range m {
			totals[k] += v
		}
	}
	acks := n.ackCount
	down := n.pgDowntime
	if n.pgKilled > 0 {
		n.faults["pg_crash_sigkill"] = n.pgKilled
	}
	n.mu.Unlock()
	var classes []string
	for k, v := range totals {
		if k != "calls" && k != "ran" {
			classes = append(classes, fmt.Sprintf("%s=%d", k, v))
		}
	}
	sort.Strings(classes)
	n.t.Logf("nemesis %s: %d Do calls (%s), %d ran their effect; %d keys, %d effects in the ledger, "+
		"%d keys with effects twice, %d released-but-committed; faults %v; %d acks, the results of %d keys, all replayed; "+
		"PostgreSQL down %s in all; final sweep: %d stale, %d committed, %d not committed",
		n.cfg.mode, totals["calls"], strings.Join(classes, " "), totals["ran"], f.keys, f.effects,
		len(f.twice), len(f.releasedButCommitted), n.faults, acks, f.acksVerified,
		down.Round(time.Millisecond), swept.Stale, swept.Committed, swept.NotCommitted)
	n.mu.Lock()
	for _, e := range n.errors {
		n.t.Logf("error: %s", e)
	}
	n.mu.Unlock()
	n.t.Logf("effects twice: %d keys, %d of them seen by the late executor's Do, %d unseen",
		len(f.twice), len(f.twiceSeen), len(f.twice)-len(f.twiceSeen))
	for _, k := range f.twice {
		n.t.Logf("twice: %s: %s; %s; %s", k, n.story(k), recordStory(s, k), ledgerStory(f.ledger[k]))
	}
	for _, k := range f.releasedButCommitted {
		n.t.Logf("released but committed: %s: %s; %s", k, n.story(k), recordStory(s, k))
	}
}

// checkMarked: every key whose unfenced effect ran twice and whose late
// executor's Do saw its write succeed says so (Record.MayHaveRunTwice).
// With a grace that covers the nemesis's delays (nemesisCoveringGrace),
// every double must be marked: none may be silent. With a shorter grace
// the unseen ones are only reported: a write landed after recovery asked
// the Resolver, and no process learned of it (the window RecoveryGrace's
// documentation states).
func (n *nemesis) checkMarked(s *idem.Store, f nemesisFindings) {
	keys := f.twiceSeen
	if n.cfg.grace >= nemesisCoveringGrace {
		keys = f.twice
	}
	var silent []string
	for _, k := range keys {
		rec, err := s.Get(ctx, nemesisScope, k)
		require.NoError(n.t, err)
		if !rec.MayHaveRunTwice {
			silent = append(silent, fmt.Sprintf("%s: %s; %s; %s", k, n.story(k), recordStory(s, k), ledgerStory(f.ledger[k])))
		}
	}
	require.Empty(n.t, silent, "unfenced effects that ran twice, their keys not marked MayHaveRunTwice (grace %s)", n.cfg.grace)
}

// ledgerStory is when each of a key's executions reached the ledger.
func ledgerStory(rows []ledgerRow) string {
	var b strings.Builder
	b.WriteString("ledger:")
	for _, r := range rows {
		fmt.Fprintf(&b, " [%s token %d at %s]", r.executor, r.token, r.at.UTC().Format("15:04:05.000"))
	}
	return b.String()
}

// recordStory is the key's record in a line: state, token, attempts.
func recordStory(s *idem.Store, key string) string {
	rec, err := s.Get(ctx, nemesisScope, key)
	if err != nil {
		return "record: " + err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "record %s token %d recovered %q, attempts:", rec.State, rec.Token, rec.Recovered)
	for _, a := range rec.Attempts {
		fmt.Fprintf(&b, " [%d %s %s %q claimed %s ended %s]", a.Token, a.Owner, a.Outcome, a.Reason,
			a.ClaimedAt.UTC().Format("15:04:05.000"), a.EndedAt.UTC().Format("15:04:05.000"))
	}
	return b.String()
}
