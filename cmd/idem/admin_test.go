package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/idemadmin"
	"github.com/idemkit/idem/idemtest"
)

var updateGolden = flag.Bool("update", false, "rewrite the testdata/*.golden files of the operator subcommands")

// runIdem runs the command line in-process and returns its exit status,
// stdout and stderr.
func runIdem(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// mustRun runs the command line and fails the test unless it exits 0.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := runIdem(t, args...)
	if code != 0 {
		t.Fatalf("idem %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
	}
	return stdout
}

// golden compares got with testdata/name.golden, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (run with -update if the change is intended)\ngot:\n%s\nwant:\n%s",
			name, path, got, want)
	}
}

func contains(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, out)
		}
	}
}

// hasRow checks that a line of a table starts with the given cells.
func hasRow(t *testing.T, what, out string, cells ...string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= len(cells) && slices.Equal(f[:len(cells)], cells) {
			return
		}
	}
	t.Errorf("%s has no row %q:\n%s", what, cells, out)
}

// copyDir copies a closed store directory, for commands that write.
func copyDir(t *testing.T, from string) string {
	t.Helper()
	to := filepath.Join(t.TempDir(), "store")
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
	return to
}

// TestAdminCommands runs every operator subcommand against the store of
// the scripted run (see admin_script_test.go).
func TestAdminCommands(t *testing.T) {
	sr := buildScriptedStore(t)
	dir := sr.dir
	now := scriptNow.Format(time.RFC3339)

	t.Run("unclean after kill", func(t *testing.T) {
		contains(t, "ls after SIGKILL", sr.uncleanErr, "not closed cleanly", "crashed or was killed",
			"idem sweep "+dir)
	})
	t.Run("sweep after kill", func(t *testing.T) {
		for _, key := range []string{"refund:order-1004", "refund:order-1005", "refund:order-1006"} {
			hasRow(t, "sweep after SIGKILL", sr.sweepAfterKill, "stale", "shop-1", key)
		}
		contains(t, "sweep after SIGKILL", sr.sweepAfterKill, "no resolver configured", "left as they were 3")
	})
	t.Run("held by a server", func(t *testing.T) {
		contains(t, "stats while held", sr.heldErr, "held by a running process", "idemadmin.Handler",
			"stop the server")
	})

	t.Run("inspect", func(t *testing.T) {
		for _, tc := range []struct {
			order string
			wants []string
		}{
			// Replays and a 422, counted and dated; at least, since the
			// killed child below may have held counts (a lower bound, marked).
			{"1001", []string{"done: repeats get status 201", "replayed at least 3 times", "replays      ≥ 3",
				"counts       approximate: a lower bound", "1× 422 (different payload)",
				"claim 1 of 1: token 1 by process-1", "completed: status 201 saved", "2026-03-02 09:04:00Z  1h56m ago  replayed",
				"2026-03-02 09:03:00Z  1h57m ago  rejected"}},
			// A failed attempt released, then a second claim completed.
			{"1002", []string{"2 claims", "released (error): the next request runs it again",
				"claim 2 of 2: token 3", "replayed at least 1 time"}},
			// A 409 during the claim.
			{"1003", []string{"1× 409 (in progress)"}},
			// The crash: claimed by the killed child, orphaned by the
			// restart, recovered as committed, then replayed.
			{"1004", []string{"claim 1 of 1: token 1025 by process-2", "orphaned by a restart: the process holding the claim was gone",
				"recovered: the resolver said committed; status 201 saved", "replayed at least 1 time"}},
			// The crash: recovered as not committed, then run again.
			{"1005", []string{"recovered: not committed; released, the next request runs it",
				"claim 2 of 2: token", "by process-3", "completed: status 201 saved"}},
			// The crash: the resolver never knew; recovery gave up.
			{"1006", []string{"needs attention: recovery gave up after 2 inconclusive checks", "orphaned",
				"the resolver could not tell (2 checks)", "an operator must decide"}},
			// Held for recovery: stuck.
			{"1008", []string{"stuck: its lease ended 1h20m ago", "lease ended: awaiting recovery"}},
			// A live claim.
			{"1009", []string{"in progress: a live claim (lease ends in 20s)", "lease ends unless its holder extends it"}},
		} {
			out := normalizeOwners(t, dir, mustRun(t, "inspect", dir, "-scope", "shop-1", "-now", now,
				"refund:order-"+tc.order))
			contains(t, "inspect "+tc.order, out, tc.wants...)
			switch tc.order {
			case "1001", "1004", "1005", "1006":
				golden(t, "inspect_"+tc.order, out)
			}
		}
		// Flags after the key work too, and the JSON is the Story.
		var st idemadmin.Story
		out := mustRun(t, "inspect", "email:welcome-77", "-dir", dir, "-scope", "shop-2", "-now", now, "--json")
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if st.Condition != "expired" || st.Result == nil || st.Result.Status != 200 || len(st.Timeline) == 0 ||
			st.Timeline[len(st.Timeline)-1].Event != "expired" {
			t.Errorf("welcome email: %+v", st)
		}
	})
	t.Run("inspect errors", func(t *testing.T) {
		code, _, stderr := runIdem(t, "inspect", "-dir", dir, "refund:order-1001") // wrong scope
		if code != 1 || !strings.Contains(stderr, `no record of key "refund:order-1001" in scope ""`) {
			t.Errorf("unknown key: exit %d, %s", code, stderr)
		}
		for _, args := range [][]string{{"inspect", "-dir", dir}, {"inspect", "k"}, {"inspect", dir},
			{"inspect", dir, "a", "b"}, {"inspect", "-dir", dir, "a", "b"}} {
			if code, _, _ := runIdem(t, args...); code != 2 {
				t.Errorf("idem %q: exit %d, want 2", args, code)
			}
		}
		code, _, stderr = runIdem(t, "inspect", t.TempDir(), "k")
		if code != 1 || !strings.Contains(stderr, "no idem store at") {
			t.Errorf("empty directory: exit %d, %s", code, stderr)
		}
	})

	t.Run("ls", func(t *testing.T) {
		out := mustRun(t, "ls", dir, "-now", now)
		golden(t, "ls", out)
		lines := strings.Split(out, "\n")
		for i, prefix := range []string{"CONDITION", "attention", "stuck", "in_progress"} {
			if !strings.HasPrefix(lines[i], prefix) {
				t.Errorf("line %d of ls starts %q, want %q:\n%s", i, lines[i], prefix, out)
			}
		}
		hasRow(t, "ls", out, "expired", "shop-2", "email:welcome-77")
		hasRow(t, "ls", out, "released", "shop-2", "refund:order-2001")
		contains(t, "ls", out, "the claim shown in progress is held by nobody")

		out = mustRun(t, "ls", "-now", now, dir, "-state", "done", "-scope", "shop-1", "-older-than", "1h30m", "-limit", "2")
		golden(t, "ls_filtered", out)
		contains(t, "filtered ls", out, "(2 of 4 matching records shown)")

		var l idemadmin.Listing
		if err := json.Unmarshal([]byte(mustRun(t, "ls", "-dir", dir, "-now", now, "-state", "stuck", "-json")), &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Rows) != 1 || l.Rows[0].Key != "refund:order-1008" || l.Scanned != 10 {
			t.Errorf("stuck claims: %+v", l)
		}
		if code, _, stderr := runIdem(t, "ls", dir, "-state", "bogus"); code != 2 || !strings.Contains(stderr, "unknown state") {
			t.Errorf("bad state: exit %d, %s", code, stderr)
		}
	})

	t.Run("stats", func(t *testing.T) {
		out := mustRun(t, "stats", dir, "-now", now)
		contains(t, "stats", out, "records            10", "in progress      3 (1 stuck, 1 need attention)",
			"oldest open claim  shop-1 refund:order-1006, claimed 2026-03-02 09:20:00Z", "disk")
		// Sizes on disk vary with Badger's layout: mask them.
		out = regexp.MustCompile(`(?m)^free space .*$`).ReplaceAllString(out, "free space  (masked)")
		golden(t, "stats", regexp.MustCompile(`(?m)^disk .*$`).ReplaceAllString(out, "disk  (masked)"))
		var st idemadmin.Stats
		if err := json.Unmarshal([]byte(mustRun(t, "stats", "-dir", dir, "-now", now, "-json")), &st); err != nil {
			t.Fatal(err)
		}
		if st.Records != 10 || st.Done != 6 || st.Released != 1 || st.Expired != 1 || st.Disk == nil ||
			st.Disk.LSM+st.Disk.VLog == 0 || !st.ExpiryHorizon.Equal(scriptT0.Add(36*time.Minute+24*time.Hour)) {
			t.Errorf("stats: %+v", st)
		}
	})

	t.Run("export", func(t *testing.T) {
		out := mustRun(t, "export", dir)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 10 {
			t.Fatalf("%d lines, want 10:\n%s", len(lines), out)
		}
		found := false
		for _, line := range lines {
			var a idemadmin.AuditRecord
			if err := json.Unmarshal([]byte(line), &a); err != nil {
				t.Fatalf("%v: %s", err, line)
			}
			if a.Key == "refund:order-1004" {
				found = true
				if a.Result == nil || string(a.Result.Body) != `{"refund":"re_1004","amount":"40.00"}` ||
					a.Recovered != "committed" || len(a.Attempts) != 1 || a.Attempts[0].Outcome != "recovered: committed" {
					t.Errorf("1004 exported as %s", line)
				}
				if !strings.Contains(line, base64.StdEncoding.EncodeToString(a.Result.Body)) {
					t.Errorf("body not in base64: %s", line)
				}
			}
		}
		if !found {
			t.Error("refund:order-1004 not exported")
		}
		// -json, which the other commands take, is export's only format.
		if js := mustRun(t, "export", "-dir", dir, "-json"); js != out {
			t.Errorf("export -json differs from export:\n%s", js)
		}
		out = mustRun(t, "export", dir, "-no-bodies")
		if strings.Contains(out, `"body":`) || !strings.Contains(out, `"body_bytes":37`) {
			t.Errorf("-no-bodies:\n%s", out)
		}
	})

	t.Run("sweep", func(t *testing.T) {
		// Sweep writes: run it on a copy.
		cp := copyDir(t, dir)
		out := mustRun(t, "sweep", cp, "-now", now)
		golden(t, "sweep", out)
		contains(t, "sweep", out, "no resolver:", "no resolver configured", "expired records reclaimed 1")
		hasRow(t, "sweep", out, "stale", "shop-1", "refund:order-1008")
		hasRow(t, "sweep", out, "stale", "shop-1", "refund:order-1009")
		hasRow(t, "sweep", out, "expired", "shop-2", "email:welcome-77")
		// The expired record is gone; the stuck ones are orphaned now.
		code, _, stderr := runIdem(t, "inspect", "-dir", cp, "-scope", "shop-2", "-now", now, "email:welcome-77")
		if code != 1 || !strings.Contains(stderr, "no record") {
			t.Errorf("reclaimed record: exit %d, %s", code, stderr)
		}
		out = mustRun(t, "ls", cp, "-now", now, "-state", "stuck")
		contains(t, "ls after sweep", out, "refund:order-1008", "refund:order-1009", "orphaned")
		var res idemadmin.SweepResult
		if err := json.Unmarshal([]byte(mustRun(t, "sweep", "-dir", cp, "-now", now, "-json")), &res); err != nil {
			t.Fatal(err)
		}
		if res.Resolver || res.Counts.Stale != 2 || res.Counts.Unresolved != 2 || res.Counts.Expired != 0 || len(res.Decisions) != 2 {
			t.Errorf("second sweep: %+v", res)
		}
	})
}

func TestScanCounter(t *testing.T) {
	var buf bytes.Buffer
	tick := make(chan time.Time)
	c := startScanCounter(&buf, "scanned", tick)
	c.progress()(42)
	tick <- time.Time{} // received: drawn before finish returns
	c.finish()
	if got := buf.String(); got != "\rscanned 42 records\r\033[K" {
		t.Errorf("drew %q", got)
	}
	var nilCounter *scanCounter
	if nilCounter.progress() != nil || newScanCounter(&buf, "x") != nil {
		t.Error("a counter drawn to a buffer, not a terminal")
	}
	nilCounter.finish()
}

// TestRun_Help checks that -h, -help and --help print each command's
// usage to stderr and exit 0, as "idem help" does.
func TestRun_Help(t *testing.T) {
	for _, c := range commands() {
		for _, flag := range []string{"-h", "-help", "--help"} {
			code, stdout, stderr := runIdem(t, c.name, flag)
			if code != 0 || stdout != "" || !strings.HasPrefix(stderr, "usage: idem "+c.name) {
				t.Errorf("idem %s %s: exit %d, stdout %q, stderr %.80q", c.name, flag, code, stdout, stderr)
			}
		}
	}
}

// TestSweep_NothingToDecide checks sweep -json on a store with nothing to
// sweep: its decisions are [], not null.
func TestSweep_NothingToDecide(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := idem.Open(dir, &idem.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, "sweep", "-dir", dir, "-now", scriptNow.Format(time.RFC3339), "-json")
	golden(t, "sweep_nothing_json", out)
	contains(t, "sweep -json", out, `"decisions": []`)
}

// TestInspect_ReplayAfterCompletion checks the order of a story whose
// replay was timed 50 ms before the completion it replays, within one
// second, as a replay answered from memory can be: replayed comes after
// completed.
func TestInspect_ReplayAfterCompletion(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store")
	doneAt := scriptT0.Add(500 * time.Millisecond)
	s, err := idem.Open(dir, &idem.Options{Clock: idemtest.NewClock(doneAt), SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	req := idem.Request{Scope: "shop-1", Key: "refund:order-3001", Fingerprint: "idemfp1-sha256:3001"}
	if _, _, err := s.Do(ctx, req, scriptOK(201, `{"refund":"re_3001"}`)); err != nil {
		t.Fatal(err)
	}
	err = s.Backend().(backend.Tallier).AddTallies(ctx, []backend.Tally{{Scope: req.Scope, Key: req.Key,
		Replays: 1, LastReplay: doneAt.Add(-50 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	out := normalizeOwners(t, dir, mustRun(t, "inspect", "-dir", dir, "-scope", "shop-1",
		"-now", scriptNow.Format(time.RFC3339), "refund:order-3001"))
	golden(t, "inspect_replay_same_second", out)
	if c, r := strings.Index(out, "completed"), strings.Index(out, "replayed "); c < 0 || r < c {
		t.Errorf("replayed listed before completed:\n%s", out)
	}
}
