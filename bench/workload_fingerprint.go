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
		About: "idem.Fingerprint(\"POST\", \"/refunds\", \"application/json\", body) against sha256.Sum256(body); " +
			"one goroutine",
		Unit: "ns/op", Reference: "idem.Fingerprint"})
	body := []byte(requestBody)
	ops := []struct {
		name string
		fn   func() error
	}{
		{"idem.Fingerprint", func() error {
			_, err := idemFingerprint("POST", "/refunds", "application/json", body)
			return err
		}},
		{"sha256.Sum256", func() error {
			sha256.Sum256(body)
			return nil
		}},
	}
	for rep := range s.plan.Reps {
		for _, o := range ops {
			ns, err := micro(ctx, s.plan.MicroDuration, o.fn)
			s.add(id, o.name, ns, nil, err)
			s.logf("  rep %d %-12s %-18s %8.0f ns/op", rep+1, id, o.name, ns)
		}
	}
	return ctx.Err()
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
