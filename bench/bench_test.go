package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets the test binary serve as the dataset workload's child
// process, as the bench binary does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "-child=") {
		if err := mainErr(context.Background(), os.Args[1:]); err != nil {
			os.Stderr.WriteString("bench child: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSuite_Smoke runs every workload against every contender for a
// handful of operations and checks that each either measured a figure or
// says why not (a server that is not installed, a workload that does not
// apply), that no store broke exactly-once, and that the report files are
// written. It judges no figure: the targets live in the report.
func TestSuite_Smoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers and child processes")
	}
	res, err := runSuite(context.Background(), smokePlan(), t.TempDir(), nil, nil, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Measurements) == 0 {
		t.Fatal("no measurements")
	}
	for _, m := range res.Measurements {
		switch {
		case strings.HasPrefix(m.Status, "error"):
			t.Errorf("%s / %s: %s", m.Workload, m.Contender, m.Status)
		case m.Status == "" && len(m.Reps) == 0:
			t.Errorf("%s / %s: neither a figure nor a reason", m.Workload, m.Contender)
		}
	}
	for _, id := range []string{"cycle-1", "cycle-32", "replay-32"} {
		if m := res.find(id, "idem"); !m.ok() {
			t.Errorf("idem has no %s figure: %+v", id, m)
		}
	}
	out := t.TempDir()
	if err := writeResults(out, res); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"report.md", "results.json", "chart.svg"} {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil || len(b) == 0 {
			t.Errorf("%s: %v, %d bytes", f, err, len(b))
		}
	}
}
