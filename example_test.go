package idem_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/idemkit/idem/idemtest"
)

func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)

	store, err := idem.Open(dir, &idem.Options{Retention: 48 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	fmt.Println(store.Options().Retention, store.Options().Durability)
	// Output: 48h0m0s durable
}

func ExampleStore_Do() {
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true}) // the embedded store, in memory
	if err != nil {
		log.Fatal(err)
	}
	store := idem.New(mem, &idem.Options{})
	defer store.Close()

	refunds := 0
	refund := func(ctx context.Context) (idem.Result, error) {
		refunds++
		return idem.Result{Status: 201, Body: []byte(`{"refund":"re_1"}`)}, nil
	}
	req := idem.Request{Scope: "tenant-42", Key: "refund:order-123", Fingerprint: "fp-of-the-body"}
	for attempt := 1; attempt <= 3; attempt++ {
		res, replayed, err := store.Do(context.Background(), req, refund)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(attempt, res.Status, string(res.Body), "replayed:", replayed)
	}
	fmt.Println("refunds executed:", refunds)
	// Output:
	// 1 201 {"refund":"re_1"} replayed: false
	// 2 201 {"refund":"re_1"} replayed: true
	// 3 201 {"refund":"re_1"} replayed: true
	// refunds executed: 1
}

func ExampleStore_Begin() {
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true}) // the embedded store, in memory
	if err != nil {
		log.Fatal(err)
	}
	store := idem.New(mem, &idem.Options{})
	defer store.Close()
	ctx := context.Background()
	req := idem.Request{Key: "charge-7", Fingerprint: "fp"}

	claim, _, err := store.Begin(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	// A repeat while the first attempt runs is told to come back later.
	_, _, err = store.Begin(ctx, req)
	fmt.Println("in progress:", errors.Is(err, idem.ErrInProgress))

	// A repeat with another payload is refused.
	_, _, err = store.Begin(ctx, idem.Request{Key: "charge-7", Fingerprint: "other"})
	fmt.Println("mismatch:", errors.Is(err, idem.ErrMismatch))

	if err := claim.Complete(ctx, idem.Result{Status: 200, Body: []byte("charged")}); err != nil {
		log.Fatal(err)
	}
	_, saved, _ := store.Begin(ctx, req)
	fmt.Println("replay:", string(saved.Body))
	// Output:
	// in progress: true
	// mismatch: true
	// replay: charged
}

func ExampleResolverFunc() {
	// The downstream system (a payment provider, a ledger) is the truth about
	// whether an effect happened. Here a map stands in for it.
	ledger := map[string]string{"refund:order-9": `{"refund":"re_9"}`}
	resolver := idem.ResolverFunc(func(ctx context.Context, rec *idem.Record) (idem.Resolution, error) {
		if body, ok := ledger[rec.Key]; ok {
			return idem.Resolution{Verdict: idem.VerdictCommitted, Result: idem.Result{Status: 201, Body: []byte(body)}}, nil
		}
		return idem.Resolution{Verdict: idem.VerdictNotCommitted}, nil
	})
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	req := idem.Request{Key: "refund:order-9", Fingerprint: "fp"}

	// A process claims the key, performs the refund downstream and dies
	// before saving the result (here: closes without completing).
	first, _ := idem.Open(dir, &idem.Options{CloseTimeout: time.Millisecond})
	if _, _, err := first.Begin(ctx, req); err != nil {
		log.Fatal(err)
	}
	first.Close()

	// The next process finds the orphaned claim and asks the resolver.
	store, err := idem.Open(dir, &idem.Options{Resolver: resolver, SweepInterval: -1})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	res, replayed, err := store.Do(ctx, req, func(context.Context) (idem.Result, error) {
		panic("the refund must not run twice")
	})
	fmt.Println(string(res.Body), replayed, err)
	// Output: {"refund":"re_9"} true <nil>
}

func ExampleStore_Sweep() {
	clock := idemtest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true}) // the embedded store, in memory
	if err != nil {
		log.Fatal(err)
	}
	store := idem.New(mem, &idem.Options{

		SweepInterval: -1, // no background sweep: call Sweep by hand
		Retention:     time.Hour,
		Clock:         clock,
	})
	defer store.Close()
	ctx := context.Background()
	_, _, _ = store.Do(ctx, idem.Request{Key: "short-lived"}, func(context.Context) (idem.Result, error) {
		return idem.Result{Status: 200}, nil
	})
	clock.Advance(2 * time.Hour) // let the hour of retention pass
	rep, err := store.Sweep(ctx)
	fmt.Println("expired:", rep.Expired, err)
	// Output: expired: 1 <nil>
}

func ExampleKeyDeriver_Step() {
	// Decide the key once, when the agent plans step 3 of its run, and
	// store it with the step: every retry and resume sends the same key.
	keys := idem.KeyDeriver{} // or KeyDeriver{Namespace: yourOwnUUID}
	a := keys.Step("run-2f9c", 3, "refund_order")
	b := keys.Step("run-2f9c", 3, "refund_order")
	c := keys.Step("run-2f9c", 4, "refund_order")
	fmt.Println(a == b, a == c, len(a))
	// Output: true false 36
}

func ExampleKeyDeriver_Effect() {
	// A once-per-run effect: asked for at step 4 and again at step 7, the
	// refund of order 123 gets one key.
	atStep4 := idem.KeyDeriver{}.Effect("run-2f9c", "refund:order-123")
	atStep7 := idem.KeyDeriver{}.Effect("run-2f9c", "refund:order-123")
	other := idem.KeyDeriver{}.Effect("run-2f9c", "refund:order-124")
	fmt.Println(atStep4 == atStep7)
	fmt.Println(atStep4 == other)
	// Output:
	// true
	// false
}

func Example_logger() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // keep the example's output stable
			}
			return a
		},
	}))
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true}) // the embedded store, in memory
	if err != nil {
		log.Fatal(err)
	}
	store := idem.New(mem, &idem.Options{Logger: logger})
	defer store.Close()
	req := idem.Request{Scope: "t1", Key: "k1"}
	fn := func(context.Context) (idem.Result, error) { return idem.Result{Status: 200}, nil }
	_, _, _ = store.Do(context.Background(), req, fn)
	_, _, _ = store.Do(context.Background(), req, fn)
	// Output:
	// level=DEBUG msg="idem claimed" event=claimed scope=t1 key=k1 token=1
	// level=DEBUG msg="idem completed" event=completed scope=t1 key=k1 token=1
	// level=DEBUG msg="idem replayed" event=replayed scope=t1 key=k1 token=1
}

func ExampleNew() {
	// New runs a Store over any Backend: here the Badger one, in pgstore's
	// place.
	b, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
	if err != nil {
		log.Fatal(err)
	}
	store := idem.New(b, &idem.Options{Lease: time.Minute})
	defer store.Close()
	fmt.Println(store.Options().Lease)
	// Output: 1m0s
}

func ExampleClaimFromContext() {
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true}) // the embedded store, in memory
	if err != nil {
		log.Fatal(err)
	}
	store := idem.New(mem, &idem.Options{})
	defer store.Close()
	_, _, _ = store.Do(context.Background(), idem.Request{Key: "k"}, func(ctx context.Context) (idem.Result, error) {
		c, _ := idem.ClaimFromContext(ctx)
		// A downstream that keeps the highest token it saw per key can refuse
		// writes from a holder whose claim was taken over.
		fmt.Println("token", c.Token(), "key", c.Key())
		return idem.Result{Status: 200}, nil
	})
	// Output: token 1 key k
}

func ExampleDownstreamKey() {
	mem, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
	if err != nil {
		log.Fatal(err)
	}
	store := idem.New(mem, &idem.Options{})
	defer store.Close()
	req := idem.Request{Scope: "refunds", Key: "refund:order-123"}
	_, _, _ = store.Do(context.Background(), req, func(ctx context.Context) (idem.Result, error) {
		// The payment API deduplicates by its own Idempotency-Key: send one
		// that every attempt of this claim derives alike.
		key, err := idem.DownstreamKey(ctx, "payments")
		if err != nil {
			return idem.Result{}, err
		}
		fmt.Println("Idempotency-Key:", key)
		return idem.Result{Status: 200}, nil
	})
	_, err = idem.DownstreamKey(context.Background(), "payments")
	fmt.Println(errors.Is(err, idem.ErrNoClaim))
	// Output:
	// Idempotency-Key: 2b59d81c-e3ee-55fe-9db8-06d2e4ae441c
	// true
}
