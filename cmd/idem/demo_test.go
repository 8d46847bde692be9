package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
)

// TestRunDemo runs the demo in-process with a fixed seed: with idem no
// refund runs twice and every intended one runs, without keys some run
// more than once; the store it keeps agrees with the ledger.
func TestRunDemo(t *testing.T) {
	var bar bytes.Buffer
	cfg := demoConfig{Seed: 7, Agents: 24, Refunds: 3, Crash: true, Dir: t.TempDir(), Progress: &bar}
	rep, err := runDemo(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, a := rep.With, rep.Without
	t.Logf("without keys: %+v", a)
	t.Logf("with idem:    %+v", w)

	intended := cfg.Agents * cfg.Refunds
	if w.Intended != intended || a.Intended != intended {
		t.Fatalf("intended %d and %d, want %d", a.Intended, w.Intended, intended)
	}
	if w.Duplicates != 0 || w.WrongAmount != 0 || w.Missing != 0 || w.Executed != intended {
		t.Fatalf("with idem: %d executed, %d duplicates, %d with a changed amount, %d missing",
			w.Executed, w.Duplicates, w.WrongAmount, w.Missing)
	}
	if a.Duplicates == 0 {
		t.Fatalf("without keys no refund ran twice: the faults did not bite")
	}
	if w.Crashes != 1 || a.Crashes != 1 {
		t.Fatalf("crashes %d and %d, want one per run", a.Crashes, w.Crashes)
	}
	if w.Replays == 0 {
		t.Fatalf("with idem nothing was replayed")
	}
	// The crash strikes while a refund is made and not yet recorded: its
	// claim is left open, and recovery resolves it against the ledger.
	if w.RecoveredCommitted+w.RecoveredNotCommitted == 0 {
		t.Fatalf("the crash left no claim to recover")
	}
	if !strings.Contains(bar.String(), "\r") || !strings.Contains(bar.String(), "refunds") {
		t.Fatalf("no progress drawn: %q", bar.String())
	}
	// The bar ends full, then is cleared.
	full := fmt.Sprintf("%d/%d refunds\r\033[K", 2*intended, 2*intended)
	if !strings.HasSuffix(bar.String(), full) {
		t.Fatalf("the bar does not end at its total: %q", bar.String()[max(0, bar.Len()-120):])
	}
	// A refused changed amount is a changed amount: each refusal answered
	// one tool call that sent a changed amount.
	if w.Refused > w.Drifts {
		t.Fatalf("with idem: %d calls refused with 422, but the model changed only %d amounts", w.Refused, w.Drifts)
	}

	// Every intended refund's key is done in the store, with the refund's
	// answer saved.
	store, err := idem.Open(rep.StoreDir, &idem.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	done := 0
	err = store.Backend().(backend.Lister).Scan(context.Background(), func(rec *idem.Record) bool {
		if rec.State == idem.StateDone {
			done++
			if rec.Result.Status != http.StatusCreated {
				t.Errorf("key %s saved status %d", rec.Key, rec.Result.Status)
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if done != intended {
		t.Fatalf("%d done records, want %d", done, intended)
	}
}

func TestRun_Dispatch(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{nil, 2, "usage: idem <command>"},
		{[]string{"help"}, 0, "demo"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"demo", "-agents", "0"}, 2, "-agents must be 1 to 1000"},
		{[]string{"demo", "-refunds", "99"}, 2, "-refunds must be 1 to 50"},
		{[]string{"demo", "a", "b"}, 2, `want "idem demo [DIR]" or "idem demo -dir DIR"; got 2 arguments`},
		{[]string{"demo", "-h"}, 0, "usage: idem demo"},
		{[]string{"demo", "-bogus"}, 2, "flag provided but not defined"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(ctx, tc.args, &stdout, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("run %q: exit %d, stderr %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.stderr)
		}
	}
}

func TestRun_Demo(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"demo", "-agents", "6", "-refunds", "2", "-seed", "3"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{"without keys", "with idem", "refunds executed", "duplicate refunds",
		"responses replayed", "409 in progress", "422 changed amount refused", "claims recovered after the crash",
		"With idem, no refund was paid twice"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\r") {
		t.Errorf("progress drawn to a buffer, not a terminal")
	}
}

func TestDemoReport_Verdict(t *testing.T) {
	var rep demoReport
	rep.Without.Duplicates = 5
	if err := rep.verdict(); err != nil {
		t.Fatalf("duplicates without keys failed the demo: %v", err)
	}
	rep.With.Duplicates = 1
	if err := rep.verdict(); err == nil || !strings.Contains(err.Error(), "1 duplicate") {
		t.Fatalf("a duplicate with idem passed: %v", err)
	}
}

// TestDemoReport_Print checks the rows a newcomer compares: the 422 row
// counts refused tool calls (never more than the changed amounts), and a
// note says why the fault counts differ between the columns.
func TestDemoReport_Print(t *testing.T) {
	rep := demoReport{Config: demoConfig{Seed: 1, Agents: 2, Refunds: 3, Crash: true}}
	rep.Without.Drifts, rep.Without.Restarts, rep.Without.Timeouts = 91, 80, 21
	rep.With.Drifts, rep.With.Restarts, rep.With.Timeouts = 15, 29, 35
	rep.With.Refused, rep.With.Mismatches = 12, 27 // 27 answers to 12 calls: retries and duplicate deliveries
	var out bytes.Buffer
	rep.print(&out)
	hasRow(t, "demo report", out.String(), "422", "changed", "amount", "refused", "-", "12")
	contains(t, "demo report", out.String(), "same rates from the same seed", "counts\ndiffer because the runs make different calls",
		"changed amount is never paid")
}

// TestProgress_ReachesTotal checks that the bar is drawn full before it
// is cleared, although some refunds were never made (an agent gave up).
func TestProgress_ReachesTotal(t *testing.T) {
	var buf bytes.Buffer
	tick := make(chan time.Time)
	p := startProgress(&buf, 10, tick)
	p.setLabel("with idem")
	for range 3 {
		p.add()
	}
	// The second send is received only once the first tick's draw has
	// returned: the bar was drawn at 3/10 before the test moves on.
	tick <- time.Time{}
	tick <- time.Time{}
	p.reach(5)
	p.reach(4) // never backwards
	if got := p.done.Load(); got != 5 {
		t.Fatalf("reach moved the bar to %d, want 5", got)
	}
	p.add()
	p.reach(10)
	p.finish()
	if !strings.Contains(buf.String(), "3/10 refunds") || !strings.HasSuffix(buf.String(), "] 10/10 refunds\r\033[K") ||
		!strings.Contains(buf.String(), "[##############################]") {
		t.Fatalf("drew %q", buf.String())
	}
	var none *progress
	none.reach(3)
	none.finish()
}
