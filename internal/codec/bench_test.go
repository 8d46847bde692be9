package codec

import (
	"bytes"
	"testing"
	"time"
)

// benchRecords are records as the store writes them: a claim in progress,
// the same claim done with a small JSON body, and a done record as idemhttp
// saves it, with headers and a 1 KiB body after a released first claim.
func benchRecords() map[string]*Record {
	at := time.Date(2026, 3, 4, 5, 6, 7, 891_234_567, time.UTC)
	fp := "idemfp1-sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	owner := "host-7/2f1c9e7a"
	claim := &Record{Format: Format, Scope: "tenant-a", Key: "refund:order-123456", State: stateInProgress,
		Fingerprint: fp, Token: 123456, LeaseEnds: at.Add(30 * time.Second), Retention: 24 * time.Hour,
		FirstSeen: at, ClaimedAt: at, Claims: 1, Owner: owner,
		Attempts: []Attempt{{Token: 123456, ClaimedAt: at, Owner: owner}}}
	done := *claim
	done.State, done.Owner = stateDone, ""
	done.Result = &Result{Status: 201, Body: []byte(`{"refund":"re_123","amount":4200}`)}
	done.DoneAt, done.ExpiresAt = at.Add(40*time.Millisecond), at.Add(24*time.Hour)
	done.Attempts = []Attempt{{Token: 123456, ClaimedAt: at, Owner: owner, EndedAt: done.DoneAt,
		Outcome: "completed", Status: 201}}
	http := done
	http.Result = &Result{Status: 201, Body: bytes.Repeat([]byte(`{"k":"v"},`), 100),
		Header: map[string][]string{"Content-Type": {"application/json"}, "Location": {"/refunds/re_123"}}}
	http.Claims = 2
	http.Attempts = []Attempt{{Token: 123000, ClaimedAt: at.Add(-time.Minute), Owner: owner,
		EndedAt: at.Add(-time.Minute / 2), Outcome: "released", Reason: "effect failed: 503"}, done.Attempts[0]}
	return map[string]*Record{"in_progress": claim, "done": &done, "http": &http}
}

// BenchmarkMarshal compares the codec with msgpack by reflection (the
// reference, as format 1 was written before).
func BenchmarkMarshal(b *testing.B) {
	for _, name := range []string{"in_progress", "done", "http"} {
		r := benchRecords()[name]
		b.Run(name+"/codec", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Marshal(r)
			}
		})
		b.Run(name+"/msgpack", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := marshalReflect(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUnmarshal compares the codec with msgpack by reflection (the
// reference, as format 1 was read before).
func BenchmarkUnmarshal(b *testing.B) {
	for _, name := range []string{"in_progress", "done", "http"} {
		enc := Marshal(benchRecords()[name])
		b.Run(name+"/codec", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Unmarshal(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/msgpack", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := unmarshalReflect(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
