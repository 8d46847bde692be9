package idemadmin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemadmin"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/keyring"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

// recovered is a record as a crash and a recovery leave it: claimed by a
// process that was killed, orphaned by the restart, resolved as committed
// by the resolver, then replayed twice.
func recovered() *idem.Record {
	return &idem.Record{
		Format: backend.Format, Scope: "shop-1", Key: "refund:order-1004", State: idem.StateDone,
		Fingerprint: "idemfp1-sha256:f009", Token: 7, Claims: 1,
		FirstSeen: t0, ClaimedAt: t0, DoneAt: t0.Add(10 * time.Minute), ExpiresAt: t0.Add(24*time.Hour + 10*time.Minute),
		Recovered: "committed",
		Result:    &idem.Result{Status: 201, Body: []byte(`{"refund":"re_1004"}`)},
		Attempts: []backend.Attempt{{Token: 7, ClaimedAt: t0, Owner: "a1b2c3d4e5f6", EndedAt: t0.Add(10 * time.Minute),
			Outcome: "recovered: committed", Reason: "orphaned by a restart", Status: 201}},
		Replays: 2, LastReplay: t0.Add(15 * time.Minute),
	}
}

// stuck is a claim whose holder died: its lease ended.
func stuck() *idem.Record {
	return &idem.Record{
		Format: backend.Format, Scope: "shop-1", Key: "refund:order-1008", State: idem.StateInProgress,
		Fingerprint: "idemfp1-sha256:56a4", Token: 11, Claims: 1, FirstSeen: t0.Add(40 * time.Minute),
		ClaimedAt: t0.Add(40 * time.Minute), LeaseEnds: t0.Add(40*time.Minute + 30*time.Second),
		Attempts: []backend.Attempt{{Token: 11, ClaimedAt: t0.Add(40 * time.Minute), Owner: "0f1e2d3c4b5a"}},
	}
}

// records is an backend.Lister over records in memory.
type records []*idem.Record

func (rs records) Scan(_ context.Context, fn func(*idem.Record) bool) error {
	for _, r := range rs {
		if !fn(r.Clone()) {
			return nil
		}
	}
	return nil
}

func ExampleTell() {
	story := idemadmin.Tell(recovered(), t0.Add(2*time.Hour))
	if err := story.WriteText(os.Stdout); err != nil {
		log.Fatal(err)
	}
	// Output:
	// key          refund:order-1004
	// scope        shop-1
	// state        done: repeats get status 201 until it expires in 22h10m
	// fingerprint  idemfp1-sha256:f009
	// token        7 (1 claim)
	// first seen   2026-03-02 09:00:00Z (2h ago)
	// result       status 201, 20 B
	// replays      2
	// rejected     0× 409, 0× 422
	// expires      2026-03-03 09:10:00Z (in 22h10m)
	//
	// TIME                  AGO        EVENT       DETAIL
	// 2026-03-02 09:00:00Z  2h ago     first_seen  first seen
	// 2026-03-02 09:00:00Z  2h ago     claimed     claim 1 of 1: token 7 by a1b2c3d4e5f6
	//                                  orphaned    orphaned by a restart: the process holding the claim was gone
	// 2026-03-02 09:10:00Z  1h50m ago  recovered   recovered: the resolver said committed; status 201 saved
	// 2026-03-02 09:15:00Z  1h45m ago  replayed    replayed 2 times; the last here
	// 2026-03-03 09:10:00Z  in 22h10m  expires     expires: replays until then
}

func ExampleList() {
	shop := "shop-1"
	l, err := idemadmin.List(context.Background(), records{recovered(), stuck()},
		idemadmin.Filter{Now: t0.Add(2 * time.Hour), Scope: &shop, Limit: 10})
	if err != nil {
		log.Fatal(err)
	}
	if err := l.WriteText(os.Stdout); err != nil {
		log.Fatal(err)
	}
	// Output:
	// CONDITION  SCOPE   KEY                TOKEN  CLAIMS  AGE    RESULT  REPLAYS  REJECTED  LEASE/EXPIRY
	// stuck      shop-1  refund:order-1008  11     1       1h20m  -       0        0         lease 1h19m ago
	// done       shop-1  refund:order-1004  7      1       1h50m  201     2        0         expiry in 22h10m
}

func ExampleNewRow() {
	r := idemadmin.NewRow(stuck(), t0.Add(time.Hour))
	fmt.Println(r.Key, r.State, r.Condition, r.Age)
	// Output: refund:order-1008 in_progress stuck 20m0s
}

func ExampleFilter_Check() {
	f := idemadmin.Filter{State: "pending"}
	fmt.Println(f.Check())
	// Output: idemadmin: unknown state "pending" (want one of attention, stuck, in_progress, done, released, expired, ran_twice)
}

func ExampleCollect() {
	st, err := idemadmin.Collect(context.Background(), records{recovered(), stuck()},
		idemadmin.StatsOptions{Now: t0.Add(2 * time.Hour)})
	if err != nil {
		log.Fatal(err)
	}
	if err := st.WriteText(os.Stdout); err != nil {
		log.Fatal(err)
	}
	// Output:
	// records            2
	//   in progress      1 (1 stuck, 0 need attention)
	//   done             1
	//   released         0
	//   expired          0 (reclaimed by the next sweep)
	// oldest open claim  shop-1 refund:order-1008, claimed 2026-03-02 09:40:00Z (1h20m ago, stuck)
	// expiry horizon     2026-03-03 09:10:00Z (in 22h10m)
	// replays            2
	// rejected           0× 409, 0× 422
}

func ExampleSweep() {
	clock := idemtest.NewClock(t0)
	var decisions idemadmin.Decisions
	store, err := idemtest.OpenBadger("", &idem.Options{
		Clock: clock, SweepInterval: -1,
		Observer: &decisions,
		Resolver: idem.ResolverFunc(func(_ context.Context, rec *idem.Record) (idem.Resolution, error) {
			// Ask the downstream: here, it has the refund.
			return idem.Resolution{Verdict: idem.VerdictCommitted, Result: idem.Result{Status: 201}}, nil
		}),
	}, badgerstore.Options{InMemory: true})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	c, _, err := store.Begin(ctx, idem.Request{Scope: "shop-1", Key: "refund:order-7", Fingerprint: "fp"})
	if err != nil {
		log.Fatal(err)
	}
	_ = c.Hold(ctx) // the outcome was ambiguous: leave it to recovery
	// Recovery asks the Resolver once the grace is over (a write the effect
	// sent may still be on its way).
	clock.Advance(store.Options().RecoveryGrace)

	res, err := idemadmin.Sweep(ctx, store, &decisions)
	if err != nil {
		log.Fatal(err)
	}
	if err := res.WriteText(os.Stdout); err != nil {
		log.Fatal(err)
	}
	// Output:
	// DECISION               SCOPE   KEY             TOKEN  DETAIL
	// recovered (committed)  shop-1  refund:order-7  1      committed downstream: its result is saved and replayed
	//
	// stale claims 1: committed 1, not committed 0, unknown 0 (attention 0), left as they were 0
	// expired records reclaimed 0
}

func ExampleExport() {
	n, err := idemadmin.Export(context.Background(), records{recovered()}, os.Stdout,
		&idemadmin.ExportOptions{NoBodies: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(n, "record")
	// Output:
	// {"scope":"shop-1","key":"refund:order-1004","state":"done","fingerprint":"idemfp1-sha256:f009","token":7,"claims":1,"first_seen":"2026-03-02T09:00:00Z","claimed_at":"2026-03-02T09:00:00Z","done_at":"2026-03-02T09:10:00Z","expires_at":"2026-03-03T09:10:00Z","retention_seconds":0,"recovered":"committed","result":{"status":201,"body_bytes":20},"attempts":[{"token":7,"claimed_at":"2026-03-02T09:00:00Z","owner":"a1b2c3d4e5f6","ended_at":"2026-03-02T09:10:00Z","outcome":"recovered: committed","reason":"orphaned by a restart","status":201}],"replays":2,"last_replay":"2026-03-02T09:15:00Z","conflicts":0,"mismatches":0}
	// 1 record
}

func ExampleNewAuditRecord() {
	a := idemadmin.NewAuditRecord(recovered(), true)
	fmt.Println(a.State, a.Result.Status, string(a.Result.Body), a.Attempts[0].Outcome)
	// Output: done 201 {"refund":"re_1004"} recovered: committed
}

func ExampleHandler() {
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true}) // the embedded store, in memory
	if err != nil {
		log.Fatal(err)
	}
	store := idem.New(mem, &idem.Options{
		Clock: idemtest.NewClock(t0), SweepInterval: -1})
	defer store.Close()
	_, _, err = store.Do(context.Background(), idem.Request{Scope: "shop-1", Key: "refund:order-1", Fingerprint: "fp"},
		func(context.Context) (idem.Result, error) { return idem.Result{Status: 201}, nil })
	if err != nil {
		log.Fatal(err)
	}

	// Who may do what: here a static token per role (a real server checks
	// its own credentials). Readers see the views; only the operator may
	// read saved bodies and run a sweep.
	authorize := func(r *http.Request, a idemadmin.Access) error {
		switch r.Header.Get("Authorization") {
		case "Bearer operator-token":
			return nil
		case "Bearer reader-token":
			if a == idemadmin.AccessRead {
				return nil
			}
			return errors.New("readers may not " + a.String())
		}
		return idemadmin.ErrUnauthenticated
	}
	// Mount it under a prefix of its own mux, served on an internal
	// listener: never http.DefaultServeMux, which also serves /debug/vars.
	ops := http.NewServeMux()
	ops.Handle("/admin/idem/", http.StripPrefix("/admin/idem",
		idemadmin.Handler(store, &idemadmin.HandlerOptions{Authorize: authorize})))
	srv := httptest.NewServer(ops)
	defer srv.Close()

	get := func(path, token string) *http.Response {
		req, _ := http.NewRequest("GET", srv.URL+"/admin/idem"+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		return resp
	}
	resp := get("/inspect?scope=shop-1&key=refund:order-1", "reader-token")
	var story idemadmin.Story
	if err := json.NewDecoder(resp.Body).Decode(&story); err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, story.Condition, story.Result.Status, len(story.Timeline))
	for _, token := range []string{"", "reader-token", "operator-token"} {
		resp := get("/export?bodies=true", token)
		resp.Body.Close()
		fmt.Printf("export with bodies, %q: %d\n", token, resp.StatusCode)
	}
	// Output:
	// 200 done 201 4
	// export with bodies, "": 401
	// export with bodies, "reader-token": 403
	// export with bodies, "operator-token": 200
}

func ExampleCountEvents() {
	m := new(expvar.Map)
	store, err := idemtest.OpenBadger("", &idem.Options{SweepInterval: -1,
		Observer: idemadmin.CountEvents(idemadmin.Expvar(m))}, badgerstore.Options{InMemory: true})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	req := idem.Request{Key: "k", Fingerprint: "fp"}
	for range 3 {
		_, _, _ = store.Do(context.Background(), req, func(context.Context) (idem.Result, error) {
			return idem.Result{Status: 200}, nil
		})
	}
	fmt.Println(m.Get("events_claimed"), m.Get("events_completed"), m.Get("events_replayed"))
	// Output: 1 1 2
}

func ExampleSetGauges() {
	st, err := idemadmin.Collect(context.Background(), records{recovered(), stuck()},
		idemadmin.StatsOptions{Now: t0.Add(2 * time.Hour)})
	if err != nil {
		log.Fatal(err)
	}
	m := new(expvar.Map)
	idemadmin.SetGauges(idemadmin.Expvar(m), st)
	fmt.Println(m.Get("records"), m.Get("records_stuck"), m.Get("oldest_open_claim_seconds"))
	// Output: 2 1 4800
}

func ExampleExpvar() {
	// Publish the map under a name of your own, once: expvar.Publish
	// panics on a name taken twice.
	m := new(expvar.Map)
	metrics := idemadmin.Expvar(m)
	metrics.Add("events_claimed", 2)
	metrics.Set("records_stuck", 1)
	fmt.Println(m.String())
	// Output: {"events_claimed": 2, "records_stuck": 1}
}

func Example_observers() {
	var decisions idemadmin.Decisions
	m := new(expvar.Map)
	obs := idem.Observers(&decisions, idemadmin.CountEvents(idemadmin.Expvar(m)), nil)
	obs.Observe(idem.Event{Kind: idem.EventStale, Key: "k"})
	fmt.Println(m.String())
	// Output: {"events_stale": 1}
}

func ExampleParseAge() {
	for _, s := range []string{"90s", "2h30m", "7d", "soon"} {
		d, err := idemadmin.ParseAge(s)
		fmt.Println(d, err)
	}
	// Output:
	// 1m30s <nil>
	// 2h30m0s <nil>
	// 168h0m0s <nil>
	// 0s idemadmin: age "soon": want a duration such as 90s, 15m, 2h or 7d
}

// ExampleInspect tells, without the key, the story of a record whose
// result is sealed: the result shows as sealed, with its status.
func ExampleInspect() {
	dir, _ := os.MkdirTemp("", "idemadmin-inspect")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	clk := idemtest.NewClock(t0)
	ring, _ := keyring.New(keyring.Key{ID: "k1", Secret: bytes.Repeat([]byte{1}, keyring.KeySize)})
	s, err := idem.Open(dir, &idem.Options{Keys: ring, Clock: clk, SweepInterval: -1})
	if err != nil {
		log.Fatal(err)
	}
	_, _, _ = s.Do(ctx, idem.Request{Scope: "shop-1", Key: "refund:order-1", Fingerprint: "fp"},
		func(context.Context) (idem.Result, error) {
			return idem.Result{Status: 201, Body: []byte(`{"iban":"DE89370400440532013000"}`)}, nil
		})
	s.Close()

	plain, err := idem.Open(dir, &idem.Options{Clock: clk, SweepInterval: -1}) // no key
	if err != nil {
		log.Fatal(err)
	}
	defer plain.Close()
	story, err := idemadmin.Inspect(ctx, plain, "shop-1", "refund:order-1", clk.Now())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(story.State, story.Claims, story.Result.Status, story.Result.Sealed)
	// Output: done 1 201 sealed under key "k1" (not given)
}
