package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"
)

// requestBody is a tool call's JSON body of about 300 bytes: what the
// fingerprint and HTTP workloads send.
const requestBody = `{"order_id":"ord_8f14e45fceea167a","amount":{"value":"42.00","currency":"EUR"},` +
	`"reason":"requested_by_customer","items":[{"sku":"SKU-1042","qty":2,"unit_price":"12.50"},` +
	`{"sku":"SKU-7730","qty":1,"unit_price":"17.00"}],"metadata":{"agent_run":"run_5c2a9e","step":7,` +
	`"tool":"refund","note":"customer \u00e9mail confirmed"},"notify":true,"idempotent":null}`

// fingerprints compares idem.Fingerprint on a ~300-byte JSON body (parse,
// canonicalise, hash) with a plain SHA-256 of the same bytes.
func (s *Suite) fingerprints(ctx context.Context) error {
	const id = "fingerprint"
	s.addWorkload(Workload{ID: id, Title: fmt.Sprintf("Fingerprint of a %d-byte JSON body", len(requestBody)),
		About: "idem.Fingerprinter{}.Sum(\"POST\", \"/refunds\", \"application/json\", body) against sha256.Sum256(body); " +
			"one goroutine",
		Unit: "ns/op", Reference: "idem.Fingerprint"})
	body := []byte(requestBody)
	names := []string{"idem.Fingerprint", "sha256.Sum256"}
	fns := []func() error{
		func() error {
			_, err := idemFingerprint("POST", "/refunds", "application/json", body)
			return err
		},
		func() error {
			sha256.Sum256(body)
			return nil
		},
	}
	return s.microPair(ctx, id, names, fns)
}

// microPair measures the micro workload id: fns, named names, timed in
// alternating turns (interleaved) for each repetition, after the machine
// settled.
func (s *Suite) microPair(ctx context.Context, id string, names []string, fns []func() error) error {
	s.quiesce(ctx)
	for rep := range s.plan.Reps {
		ns, err := interleaved(ctx, s.plan.MicroDuration, fns)
		for i, name := range names {
			if err != nil {
				s.add(id, name, 0, nil, err)
				continue
			}
			s.add(id, name, ns[i], nil, nil)
			s.logf("  rep %d %-12s %-18s %8.0f ns/op", rep+1, id, name, ns[i])
		}
	}
	return ctx.Err()
}

// microSlices is how many turns each function of interleaved gets in a
// repetition.
const microSlices = 10

// interleaved times each of fns for about d on one goroutine, in
// microSlices alternating turns, and returns each one's time per call in
// nanoseconds. Taking turns, rather than timing one function for all of d
// and then the next, puts whatever else the machine does during the
// repetition (the kernel writing back files an earlier workload left, a
// server's background work) under every function alike, so that their
// ratio holds when the absolute figures move.
func interleaved(ctx context.Context, d time.Duration, fns []func() error) ([]float64, error) {
	total := make([]float64, len(fns))
	for range microSlices {
		for i, fn := range fns {
			ns, err := micro(ctx, d/microSlices, fn)
			if err != nil {
				return nil, err
			}
			total[i] += ns
		}
	}
	for i := range total {
		total[i] /= microSlices
	}
	return total, nil
}

// micro calls fn on one goroutine for about d and returns its time per
// call in nanoseconds. The clock is read once per batch, so that reading
// it costs the measured call nothing.
func micro(ctx context.Context, d time.Duration, fn func() error) (float64, error) {
	const batch = 64
	// Warm up: caches, pools, lazily built tables.
	for range batch {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	n := 0
	start := time.Now()
	for time.Since(start) < d && ctx.Err() == nil {
		for range batch {
			if err := fn(); err != nil {
				return 0, err
			}
		}
		n += batch
	}
	return float64(time.Since(start).Nanoseconds()) / float64(n), ctx.Err()
}
