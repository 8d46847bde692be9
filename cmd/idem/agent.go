package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// Fault rates of the simulated path between agents and the tool server,
// per HTTP attempt, and of the agents' own misbehaviour, per tool call.
const (
	pDrop    = 0.10 // the server acted, the response is lost
	pTimeout = 0.05 // the client gives up while the server works on
	pDupe    = 0.05 // the network delivers the request twice
	pRestart = 0.08 // the agent loop restarts from step one after a step
	pRetryRe = 0.30 // ... or after a failed call
	pDrift   = 0.30 // on a retry, the model changes the amount

	timeoutAfter = 2 * time.Millisecond
	maxCalls     = 60                    // tool calls one agent makes before it gives up
	thinkTime    = 20 * time.Millisecond // an agent's pause after a failed call, at most
)

// step is one planned refund: the arguments the agent stores with it.
type step struct {
	order  string
	amount int // cents
}

func cents(c int) string { return fmt.Sprintf("%d.%02d", c/100, c%100) }

// runStats counts what the agents and the faulty path did in one run.
type runStats struct {
	attempts, drops, timeouts, dupes atomic.Int64
	restarts, drifts, refused        atomic.Int64
	gaveUp                           atomic.Int64
}

// errDropped is what an agent sees when the response was lost.
var errDropped = errors.New("connection reset by peer (injected after the server acted)")

// timeoutError is what an agent sees when it stopped waiting.
type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout (injected; the server is still working)" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// faultyPath is the network between one agent and the tool server. It
// points every request at the server's current address (which moves when
// the server restarts) and injects faults. It runs on its agent's
// goroutine, which owns rng; the copies it sends in the background use no
// randomness.
type faultyPath struct {
	base   http.RoundTripper
	server *toolServer
	rng    *rand.Rand
	stats  *runStats
	bg     *sync.WaitGroup // requests still travelling after their caller moved on
}

func (f *faultyPath) RoundTrip(req *http.Request) (*http.Response, error) {
	target, err := url.Parse(f.server.baseURL())
	if err != nil {
		return nil, err
	}
	r := req.Clone(req.Context())
	r.URL.Scheme, r.URL.Host, r.Host = target.Scheme, target.Host, target.Host
	f.stats.attempts.Add(1)

	switch x := f.rng.Float64(); {
	case x < pDrop:
		resp, err := f.base.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		f.stats.drops.Add(1)
		return nil, errDropped
	case x < pDrop+pTimeout:
		// The request goes on without its caller.
		late := r.Clone(context.WithoutCancel(r.Context()))
		late.Body = r.Body
		done := make(chan struct{})
		f.bg.Go(func() {
			defer close(done)
			f.send(late)
		})
		select {
		case <-done:
		case <-time.After(timeoutAfter):
		}
		f.stats.timeouts.Add(1)
		return nil, timeoutError{}
	case x < pDrop+pTimeout+pDupe:
		if r.GetBody != nil {
			if body, err := r.GetBody(); err == nil {
				dupe := r.Clone(context.WithoutCancel(r.Context()))
				dupe.Body = body
				f.bg.Go(func() { f.send(dupe) })
				f.stats.dupes.Add(1)
			}
		}
	}
	return f.base.RoundTrip(r)
}

// send makes a request whose answer nobody reads.
func (f *faultyPath) send(r *http.Request) {
	if resp, err := f.base.RoundTrip(r); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
}

// agent is one simulated agent run: a plan of refunds, carried out step by
// step through a retrying client, with a loop that restarts from step one
// and a model that sometimes changes the amount when it retries.
type agent struct {
	name     string
	runID    string
	plan     []step
	withKeys bool
	client   *http.Client
	rng      *rand.Rand
	ledger   *ledger
	stats    *runStats
	progress func()
	// token is the agent's bearer token; login issues a new one, which
	// the agent does when its loop restarts.
	token string
	login func() string
}

func (a *agent) run(ctx context.Context) {
	a.token = a.login()
	done := make([]bool, len(a.plan))
	issued := make([]int, len(a.plan)) // times each step was sent
	i := 0
	for calls := 0; i < len(a.plan) && calls < maxCalls && ctx.Err() == nil; calls++ {
		st := a.plan[i]
		amount := st.amount
		// The model, asked again for a refund that already went through (a
		// retry, or a restarted loop), sometimes makes up a new amount.
		if issued[i] > 0 && a.ledger.executed(st.order) && a.rng.Float64() < pDrift {
			amount += 100
			a.stats.drifts.Add(1)
		}
		issued[i]++
		status, err := a.call(ctx, i, st.order, amount)
		switch {
		case err == nil && status == http.StatusCreated:
			if !done[i] {
				done[i] = true
				a.progress()
			}
			i++
			if i < len(a.plan) && a.rng.Float64() < pRestart {
				i = 0 // the loop is restarted: it replays its plan from the top
				a.restart()
			}
		case err == nil && status == http.StatusUnprocessableEntity:
			// The server refused the changed amount: the agent goes back to
			// the arguments it stored with the step.
			a.stats.refused.Add(1)
		default:
			time.Sleep(time.Duration(a.rng.Int64N(int64(thinkTime))))
			if a.rng.Float64() < pRetryRe {
				i = 0
				a.restart()
			}
		}
	}
	if i < len(a.plan) {
		a.stats.gaveUp.Add(1)
	}
}

// restart counts a restart of the agent's loop, which starts with a fresh
// token: the keys it sends again are its own whatever token carries them.
func (a *agent) restart() {
	a.stats.restarts.Add(1)
	a.token = a.login()
}

// call makes one refund tool call: the key, when used, is derived from the
// run and the step, so every retry and restart of the step sends it again.
func (a *agent) call(ctx context.Context, i int, order string, amount int) (int, error) {
	body, err := json.Marshal(refundRequest{Order: order, Amount: cents(amount)})
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", "http://refund-tool/tools/refund", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+a.token)
	if a.withKeys {
		req = idemhttp.WithKey(req, idem.KeyDeriver{}.Step(a.runID, i, "refund"))
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
