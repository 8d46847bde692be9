package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/redisstore"
	"github.com/redis/go-redis/v9"
)

// trips counts a client's round trips (a command, or a pipeline of them)
// and the commands it sends, by name.
type trips struct {
	mu   sync.Mutex // guards n and cmds
	n    int
	cmds map[string]int
}

func (h *trips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

func (h *trips) count(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	for _, c := range cmds {
		h.cmds[c.Name()]++
	}
}

func (h *trips) take() (int, map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, cmds := h.n, h.cmds
	h.n, h.cmds = 0, map[string]int{}
	return n, cmds
}

// A cycle of Do on a new key is two round trips, each one script (the
// claim, the completion); an uncached replay is one, an HMGET once the
// Backend has seen that replays are what Claim mostly meets.
func TestBackend_Do_RoundTrips(t *testing.T) {
	c := client(t)
	h := &trips{cmds: map[string]int{}}
	c.AddHook(h)
	b := newBackend(t, c, nil)
	store := idem.New(b, &idem.Options{Retention: time.Hour, SweepInterval: -1})
	t.Cleanup(func() { _ = store.Close() })
	effect := func(context.Context) (idem.Result, error) { return idem.Result{Status: 200, Body: []byte("ok")}, nil }
	// The first cycle loads the scripts (EVALSHA answers NOSCRIPT, EVAL).
	if _, _, err := store.Do(ctx, idem.Request{Scope: "s", Key: "warm", Fingerprint: "fp"}, effect); err != nil {
		t.Fatal(err)
	}
	h.take()
	const n = 20
	for i := range n {
		if _, _, err := store.Do(ctx, idem.Request{Scope: "s", Key: fmt.Sprint("k", i), Fingerprint: "fp"}, effect); err != nil {
			t.Fatal(err)
		}
	}
	rt, cmds := h.take()
	if rt != 2*n || cmds["evalsha"] != 2*n {
		t.Errorf("%d cycles: %d round trips, commands %v; want 2 round trips and 2 scripts a cycle", n, rt, cmds)
	}
	// Replays through a Store whose replay cache is empty.
	fresh := idem.New(newBackend(t, c, &redisstore.Options{Prefix: b.Prefix()}), &idem.Options{Retention: time.Hour, SweepInterval: -1})
	t.Cleanup(func() { _ = fresh.Close() })
	h.take()
	for i := range n {
		_, replayed, err := fresh.Do(ctx, idem.Request{Scope: "s", Key: fmt.Sprint("k", i), Fingerprint: "fp"}, effect)
		if err != nil || !replayed {
			t.Fatalf("replay %d: %v %v", i, replayed, err)
		}
	}
	rt, cmds = h.take()
	if rt != n || cmds["hmget"] < n-1 || cmds["hmget"]+cmds["evalsha"] != n {
		t.Errorf("%d uncached replays: %d round trips, commands %v; want 1 a replay", n, rt, cmds)
	}
}
