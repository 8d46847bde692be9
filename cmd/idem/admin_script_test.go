package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
)

// The scripted run: a store made by a known sequence of requests on a
// fake clock, a child process killed with SIGKILL while it holds claims,
// and a reopen whose resolver recovers some of them. Every operator
// subcommand is tested against what it leaves.

// scriptT0 is when the scripted run starts; scriptNow is the "now" the
// commands are run at in the tests (-now).
var (
	scriptT0  = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	scriptNow = scriptT0.Add(2 * time.Hour)
)

const (
	scriptEnvDir = "IDEM_ADMIN_SCRIPT_DIR" // set in the child: the store to open
	scriptEnvNow = "IDEM_ADMIN_SCRIPT_NOW" // set in the child: its clock's time
)

// scriptResult is what the scripted run left besides the store.
type scriptResult struct {
	dir string
	// uncleanErr and heldErr are what "idem ls" printed right after the
	// kill, and while the reopened store was held.
	uncleanErr, heldErr string
	// sweepAfterKill is what "idem sweep" printed after the kill.
	sweepAfterKill string
}

func scriptFingerprint(t testing.TB, body string) string {
	t.Helper()
	fp, err := idem.Fingerprinter{}.Sum("POST", "/refunds", "application/json", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

func scriptOK(status int, body string) func(context.Context) (idem.Result, error) {
	return func(context.Context) (idem.Result, error) {
		return idem.Result{Status: status, Header: map[string][]string{"Content-Type": {"application/json"}},
			Body: []byte(body)}, nil
	}
}

// buildScriptedStore runs the script into a new directory.
func buildScriptedStore(t *testing.T) scriptResult {
	t.Helper()
	ctx := context.Background()
	res := scriptResult{dir: filepath.Join(t.TempDir(), "store")}
	clock := idemtest.NewClock(scriptT0)
	open := func(resolver idem.Resolver) *idem.Store {
		s, err := idem.Open(res.dir, &idem.Options{
			Clock: clock, SweepInterval: -1, Retention: 24 * time.Hour, Lease: 30 * time.Second,
			Resolver: resolver, MaxUnknown: 2, RecheckBackoff: time.Second, CloseTimeout: 50 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	req := func(scope, key, body string) idem.Request {
		return idem.Request{Scope: scope, Key: key, Fingerprint: scriptFingerprint(t, body)}
	}
	do := func(s *idem.Store, r idem.Request, fn func(context.Context) (idem.Result, error)) error {
		_, _, err := s.Do(ctx, r, fn)
		return err
	}
	at := func(d time.Duration) { clock.Set(scriptT0.Add(d)) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// Phase 1: ordinary traffic.
	s := open(nil)
	r1001 := req("shop-1", "refund:order-1001", `{"order":"1001","amount":"12.50"}`)
	must(do(s, r1001, scriptOK(201, `{"refund":"re_1001","amount":"12.50"}`)))
	for _, d := range []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute} {
		at(d)
		must(do(s, r1001, nil)) // replays: fn never runs
	}
	at(3 * time.Minute)
	changed := req("shop-1", "refund:order-1001", `{"order":"1001","amount":"99.00"}`)
	if err := do(s, changed, nil); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("changed amount: %v, want a mismatch", err)
	}

	at(5 * time.Minute)
	r1002 := req("shop-1", "refund:order-1002", `{"order":"1002","amount":"5.00"}`)
	err := do(s, r1002, func(context.Context) (idem.Result, error) {
		return idem.Result{}, errors.New("payment provider timeout")
	})
	if err == nil || !strings.Contains(err.Error(), "payment provider timeout") {
		t.Fatalf("failing attempt: %v", err)
	}
	at(6 * time.Minute)
	must(do(s, r1002, scriptOK(201, `{"refund":"re_1002","amount":"5.00"}`)))
	at(7 * time.Minute)
	must(do(s, r1002, nil))

	at(8 * time.Minute)
	r1003 := req("shop-1", "refund:order-1003", `{"order":"1003","amount":"7.25"}`)
	c, _, err := s.Begin(ctx, r1003)
	must(err)
	at(8*time.Minute + 10*time.Second)
	if _, _, err := s.Begin(ctx, r1003); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("repeat during the claim: %v, want in progress", err)
	}
	at(8*time.Minute + 20*time.Second)
	must(c.Complete(ctx, idem.Result{Status: 201, Body: []byte(`{"refund":"re_1003"}`)}))

	at(9 * time.Minute)
	welcome := req("shop-2", "email:welcome-77", `{"user":"77"}`)
	welcome.Retention = time.Hour
	must(do(s, welcome, scriptOK(200, `{"sent":true}`)))
	at(10 * time.Minute)
	r2001 := req("shop-2", "refund:order-2001", `{"order":"2001","amount":"3.00"}`)
	must(do(s, r2001, scriptOK(503, `{"error":"ledger down"}`))) // released by the default policy
	must(s.Close())

	// Phase 2: a process claims keys and is killed while it holds them.
	child := exec.Command(os.Args[0], "-test.run=^TestAdminScript_Child$", "-test.count=1")
	child.Env = append(os.Environ(), scriptEnvDir+"="+res.dir,
		scriptEnvNow+"="+scriptT0.Add(20*time.Minute).Format(time.RFC3339Nano))
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	must(err)
	must(child.Start())
	ready := false
	for sc := bufio.NewScanner(out); sc.Scan(); {
		if sc.Text() == "ready" {
			ready = true
			break
		}
	}
	_ = child.Process.Signal(syscall.SIGKILL)
	werr := child.Wait()
	if !ready {
		t.Fatalf("the child never got ready: %v", werr)
	}
	var exit *exec.ExitError
	if !errors.As(werr, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the child was not killed: %v", werr)
	}

	// What an operator who reads the store now is told.
	var stderr bytes.Buffer
	if code := run(ctx, []string{"ls", "-dir", res.dir}, io.Discard, &stderr); code != 1 {
		t.Fatalf("ls after the kill: exit %d, %s", code, stderr.String())
	}
	res.uncleanErr = stderr.String()
	// As that message advises, a sweep opens it for writing: it orphans
	// the dead process's claims and, with no resolver, reports them.
	stderr.Reset()
	var stdout bytes.Buffer
	if code := run(ctx, []string{"sweep", res.dir, "-now", scriptT0.Add(25 * time.Minute).Format(time.RFC3339)},
		&stdout, &stderr); code != 0 {
		t.Fatalf("sweep after the kill: exit %d, %s%s", code, stdout.String(), stderr.String())
	}
	res.sweepAfterKill = stdout.String()

	// Phase 3: the server comes back with a resolver that knows what
	// happened to some of the claims.
	at(30 * time.Minute)
	resolver := idem.ResolverFunc(func(_ context.Context, rec *idem.Record) (idem.Resolution, error) {
		switch rec.Key {
		case "refund:order-1004":
			return idem.Resolution{Verdict: idem.VerdictCommitted, Result: idem.Result{Status: 201,
				Body: []byte(`{"refund":"re_1004","amount":"40.00"}`)}}, nil
		case "refund:order-1005":
			return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
		}
		return idem.Resolution{Verdict: idem.VerdictUnknown}, nil
	})
	s = open(resolver)
	stderr.Reset()
	if code := run(ctx, []string{"stats", "-dir", res.dir}, io.Discard, &stderr); code != 1 {
		t.Fatalf("stats while the store is held: exit %d, %s", code, stderr.String())
	}
	res.heldErr = stderr.String()
	rep, err := s.Sweep(ctx)
	must(err)
	if rep.Committed != 1 || rep.NotCommitted != 1 || rep.Unknown != 1 {
		t.Fatalf("first sweep after the restart: %+v", rep)
	}
	at(30*time.Minute + 2*time.Second)
	rep, err = s.Sweep(ctx)
	must(err)
	if rep.Attention != 1 {
		t.Fatalf("second sweep: %+v, want refund:order-1006 marked for attention", rep)
	}
	at(35 * time.Minute)
	must(do(s, req("shop-1", "refund:order-1004", `{"order":"1004","amount":"40.00"}`), nil)) // replayed
	at(36 * time.Minute)
	must(do(s, req("shop-1", "refund:order-1005", `{"order":"1005","amount":"8.00"}`),
		scriptOK(201, `{"refund":"re_1005","amount":"8.00"}`)))

	at(40 * time.Minute)
	c, _, err = s.Begin(ctx, req("shop-1", "refund:order-1008", `{"order":"1008","amount":"1.00"}`))
	must(err)
	must(c.Hold(ctx)) // ambiguous: left for recovery, lease ended now
	at(2*time.Hour - 10*time.Second)
	_, _, err = s.Begin(ctx, req("shop-1", "refund:order-1009", `{"order":"1009","amount":"2.00"}`))
	must(err) // a live claim, still running when the store closes
	must(s.Close())
	return res
}

// TestAdminScript_Child is the child of the scripted run: it claims keys
// and waits to be killed. It returns at once unless the parent started it.
func TestAdminScript_Child(t *testing.T) {
	dir := os.Getenv(scriptEnvDir)
	if dir == "" {
		return
	}
	now, err := time.Parse(time.RFC3339Nano, os.Getenv(scriptEnvNow))
	if err != nil {
		t.Fatal(err)
	}
	s, err := idem.Open(dir, &idem.Options{Clock: idemtest.NewClock(now), SweepInterval: -1,
		Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, order := range []string{"1004", "1005", "1006"} {
		body := fmt.Sprintf(`{"order":%q,"amount":"%s"}`, order, map[string]string{
			"1004": "40.00", "1005": "8.00", "1006": "15.00"}[order])
		if _, _, err := s.Begin(ctx, idem.Request{Scope: "shop-1", Key: "refund:order-" + order,
			Fingerprint: scriptFingerprint(t, body)}); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Println("ready") // the claims are synced: Durable is the default
	select {}            // killed here
}

// normalizeOwners replaces the random owner names of the store's processes
// in out by process-1, process-2... in the order they first claimed.
func normalizeOwners(t *testing.T, dir, out string) string {
	t.Helper()
	s, err := idemtest.OpenBadger(dir, &idem.Options{SweepInterval: -1}, badgerstore.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := map[string]time.Time{}
	err = s.Backend().(backend.Lister).Scan(context.Background(), func(rec *idem.Record) bool {
		for _, a := range rec.Attempts {
			if at, ok := first[a.Owner]; a.Owner != "" && (!ok || a.ClaimedAt.Before(at)) {
				first[a.Owner] = a.ClaimedAt
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	owners := make([]string, 0, len(first))
	for o := range first {
		owners = append(owners, o)
	}
	sort.Slice(owners, func(i, j int) bool { return first[owners[i]].Before(first[owners[j]]) })
	for i, o := range owners {
		out = strings.ReplaceAll(out, o, fmt.Sprintf("process-%d", i+1))
	}
	return out
}
