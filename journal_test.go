package idem_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/idemhttp"
	"github.com/stretchr/testify/require"
)

func TestJournal_Plan_SavesAndReturnsFirstPlan(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	j := idem.NewJournal(s, nil)
	first, err := j.Plan(bg, "run-1", 3, "refund_order", []byte(`{"order":"o-1","amount":4200}`))
	require.NoError(t, err)
	require.False(t, first.Replanned)
	require.False(t, first.Differed)
	require.Equal(t, idem.KeyDeriver{}.Step("run-1", 3, "refund_order"), first.Key)
	require.Equal(t, `{"order":"o-1","amount":4200}`, string(first.Args))

	same, err := j.Plan(bg, "run-1", 3, "refund_order", []byte(`{ "amount": 4200.0, "order": "o-1" }`))
	require.NoError(t, err)
	require.True(t, same.Replanned)
	require.False(t, same.Differed, "the same arguments in another spelling are not a difference")
	require.Equal(t, first.Key, same.Key)
	require.Equal(t, string(first.Args), string(same.Args))
	require.True(t, same.PlannedAt.Equal(first.PlannedAt))

	regen, err := j.Plan(bg, "run-1", 3, "refund_order", []byte(`{"order":"o-1","amount":4300}`))
	require.NoError(t, err)
	require.True(t, regen.Differed, "regenerated arguments are reported")
	require.Equal(t, string(first.Args), string(regen.Args), "and never used")
	require.Equal(t, first.Key, regen.Key)

	other, err := j.Plan(bg, "run-1", 4, "refund_order", []byte(`{"order":"o-1","amount":4300}`))
	require.NoError(t, err)
	require.False(t, other.Replanned)
	require.NotEqual(t, first.Key, other.Key)
}

func TestJournal_PlanEffect_FoundAgainByALaterTurn(t *testing.T) {
	s := openStore(t, t.TempDir(), nil)
	j := idem.NewJournal(s, nil)
	atStep4, err := j.PlanEffect(bg, "run-9", "refund:order-123", "refund_order", []byte(`{"amount":10}`))
	require.NoError(t, err)
	atStep7, err := j.PlanEffect(bg, "run-9", "refund:order-123", "refund_order", []byte(`{"amount":12}`))
	require.NoError(t, err)
	require.Equal(t, atStep4.Key, atStep7.Key)
	require.Equal(t, idem.KeyDeriver{}.Effect("run-9", "refund:order-123"), atStep7.Key)
	require.True(t, atStep7.Replanned)
	require.True(t, atStep7.Differed)
	require.Equal(t, `{"amount":10}`, string(atStep7.Args))
}

func TestJournal_Plan_SurvivesRestartAndUnsavedPlan(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, nil)
	j := idem.NewJournal(s, nil)
	_, err := j.Plan(bg, "run-2", 1, "email", []byte(`{"to":"a@example.com"}`))
	require.NoError(t, err)
	// A plan claimed but never saved (the process died in between).
	// Callers cannot claim in the journal's scope, so claim on the backend.
	now := time.Now()
	_, claimed, err := s.Backend().Claim(bg, idem.JournalScope, idem.KeyDeriver{}.Step("run-2", 2, "email"), backend.ClaimArgs{
		Fingerprint: "x", Now: now, LeaseEnds: now.Add(time.Minute), Retention: time.Hour, Owner: "test"})
	require.NoError(t, err)
	require.True(t, claimed)
	require.NoError(t, s.Close())

	// The store's resolver must not be asked about journal claims.
	s = openStore(t, dir, &idem.Options{Resolver: idem.ResolverFunc(func(context.Context, *idem.Record) (idem.Resolution, error) {
		t.Error("the resolver was asked about a journal claim")
		return idem.Resolution{}, nil
	})})
	j = idem.NewJournal(s, nil)
	again, err := j.Plan(bg, "run-2", 1, "email", []byte(`{"to":"b@example.com"}`))
	require.NoError(t, err)
	require.True(t, again.Differed)
	require.Equal(t, `{"to":"a@example.com"}`, string(again.Args))
	unsaved, err := j.Plan(bg, "run-2", 2, "email", []byte(`{"to":"c@example.com"}`))
	require.NoError(t, err)
	require.False(t, unsaved.Replanned, "a plan that was never saved is planned afresh")
	require.Equal(t, `{"to":"c@example.com"}`, string(unsaved.Args))
}

// The journal test's agent: ten steps, each a refund of its own order. Its
// model regenerates the amount on every planning (a different seed each
// time), as a model asked again would.
const journalSteps = 10

func journalAgent(ctx context.Context, j *idem.Journal, url, runID string, seed int, progress func(step int)) ([]idem.Step, error) {
	client := idemhttp.NewClient(nil)
	var steps []idem.Step
	for n := 1; n <= journalSteps; n++ {
		args := fmt.Sprintf(`{"order":"order-%d","amount":%d}`, n, 100*n+seed)
		st, err := j.Plan(ctx, runID, n, "refund_order", []byte(args))
		if err != nil {
			return steps, err
		}
		steps = append(steps, st)
		req, err := http.NewRequestWithContext(ctx, "POST", url+"/refunds", bytes.NewReader(st.Args))
		if err != nil {
			return steps, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(idemhttp.WithKey(req, st.Key))
		if err != nil {
			return steps, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return steps, fmt.Errorf("step %d: status %d", n, resp.StatusCode)
		}
		if progress != nil {
			progress(n)
		}
	}
	return steps, nil
}

// TestJournal_Child is the agent run that TestJournal_KilledRunResumes
// kills; it does nothing unless started by that test.
func TestJournal_Child(t *testing.T) {
	if os.Getenv("IDEM_JOURNAL_CHILD") == "" {
		t.Skip("run by TestJournal_KilledRunResumes")
	}
	s, err := idem.Open(os.Getenv("IDEM_JOURNAL_DIR"), nil)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	j := idem.NewJournal(s, nil)
	_, err = journalAgent(context.Background(), j, os.Getenv("IDEM_JOURNAL_URL"), "run-k", 0, func(step int) {
		fmt.Println("sent", step)
		if step == 4 {
			// Wait for the kill here: a step planned but not sent before
			// it lands would make the parent's count of sent steps wrong.
			select {}
		}
	})
	fmt.Println("error", err)
	os.Exit(3) // the parent kills it before it gets here
}

func TestJournal_KilledRunResumes(t *testing.T) {
	// The tool server: a refund endpoint behind the middleware, over a
	// ledger that does not dedupe.
	type entry struct{ key, body string }
	var mu sync.Mutex
	var ledger []entry
	server := openStore(t, t.TempDir(), nil)
	h := idemhttp.Middleware(server, &idemhttp.Options{Scope: idemhttp.SharedScope})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		ledger = append(ledger, entry{r.Header.Get("Idempotency-Key"), string(body)})
		n := len(ledger)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"refund":"re_%d"}`, n)
	}))
	ts := httptest.NewServer(h)
	defer ts.Close()

	// The first run, in a child process, is killed after its fourth call.
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestJournal_Child$")
	cmd.Env = append(os.Environ(), "IDEM_JOURNAL_CHILD=1", "IDEM_JOURNAL_DIR="+dir, "IDEM_JOURNAL_URL="+ts.URL)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if lines.Text() == "sent 4" {
			break
		}
		require.NotContains(t, lines.Text(), "error")
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	mu.Lock()
	sentByChild := len(ledger)
	mu.Unlock()
	require.GreaterOrEqual(t, sentByChild, 4)

	// The run resumes from step one in this process, with a model that
	// regenerates every argument differently.
	s := openStore(t, dir, nil)
	steps, err := journalAgent(bg, idem.NewJournal(s, nil), ts.URL, "run-k", 7, nil)
	require.NoError(t, err)
	require.Len(t, steps, journalSteps)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, ledger, journalSteps, "each refund ran exactly once")
	seen := map[string]bool{}
	for i, e := range ledger {
		require.False(t, seen[e.key], "refund with key %s ran twice", e.key)
		seen[e.key] = true
		n := i + 1
		require.Equal(t, idem.KeyDeriver{}.Step("run-k", n, "refund_order"), e.key)
		want := 100*n + 7
		if n <= sentByChild {
			want = 100 * n // planned by the killed run: its arguments stand
		}
		var got struct{ Amount int }
		require.NoError(t, json.Unmarshal([]byte(e.body), &got))
		require.Equal(t, want, got.Amount, "step %d ran with %s", n, e.body)
	}
	for i, st := range steps {
		if i+1 <= sentByChild {
			require.True(t, st.Replanned && st.Differed, "step %d: the regenerated arguments must be reported", i+1)
			require.Equal(t, strconv.Itoa(100*(i+1)), string(bytes.TrimSuffix(bytes.Split(st.Args, []byte(`"amount":`))[1], []byte("}"))))
		}
	}
}
