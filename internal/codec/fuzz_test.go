package codec

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"
)

// FuzzUnmarshalRecord feeds arbitrary bytes to Unmarshal: corrupt input must
// give a *CorruptError, never a panic, and whatever decodes must encode
// and decode again to the same record.
func FuzzUnmarshalRecord(f *testing.F) {
	if golden, err := os.ReadFile("testdata/record-v1.msgpack"); err == nil {
		f.Add(golden)
		for i := 1; i < len(golden); i += 7 {
			f.Add(golden[:i])
		}
	}
	at := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	for _, r := range []*Record{
		{Key: "k", State: stateInProgress, Token: 1, LeaseEnds: at},
		{Scope: "s", Key: "k", State: stateReleased, Token: 2, ExpiresAt: at, Recovered: "why"},
		{Key: "k", State: stateDone, Token: 3, Result: &Result{Status: 500, Error: "boom", Truncated: true}},
	} {
		f.Add(Marshal(r))
	}
	f.Add([]byte{})
	f.Add([]byte{0xc1})
	f.Add([]byte{0x80})
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := Unmarshal(data)
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("decode error is not a *CorruptError: %v", err)
			}
			return
		}
		if rec.State == stateDone && rec.Result == nil {
			t.Fatal("a done record decoded without a result")
		}
		b := Marshal(rec)
		again, err := Unmarshal(b)
		if err != nil {
			t.Fatalf("a re-encoded record does not decode: %v", err)
		}
		if b2 := Marshal(again); !bytes.Equal(b, b2) {
			t.Fatal("encoding is not stable")
		}
	})
}

// FuzzRecordDecode feeds arbitrary bytes to Unmarshal and to the reference:
// both give the same record or both an error; and whatever the fast
// decoder accepts, msgpack decodes to the same record (checkDecode).
func FuzzRecordDecode(f *testing.F) {
	if golden, err := os.ReadFile("testdata/record-v1.msgpack"); err == nil {
		f.Add(golden)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 40 {
		r := genRecord(rng)
		if r.Result != nil && len(r.Result.Body) > 1024 {
			continue
		}
		b := Marshal(r)
		f.Add(b)
		f.Add(b[:rng.IntN(len(b))])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode(t, b)
	})
}

// FuzzRecordEncode builds records from fuzzed fields and checks their
// encoding against the reference (checkCodec).
func FuzzRecordEncode(f *testing.F) {
	f.Add("tenant", "key", "fp", []byte("{}"), uint64(7), int64(201), int64(-1), int64(1767225600), int64(0), uint16(0x1ff))
	f.Add("", "k", "", []byte(nil), uint64(math.MaxUint64), int64(math.MinInt64), int64(65536), int64(-1), int64(1e9-1), uint16(0))
	f.Add(strings.Repeat("s", 40), "k", strings.Repeat("f", 300), make([]byte, 300), uint64(1<<32), int64(-33), int64(128),
		int64(1<<34), int64(5), uint16(0xffff))
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, body []byte, u uint64, i1, i2, sec, nsec int64, flags uint16) {
		at := time.Unix(sec, nsec)
		at2 := time.Unix(i1, nsec)
		bit := func(i int) bool { return flags&(1<<i) != 0 }
		when := func(i int, t time.Time) time.Time {
			if bit(i) {
				return t
			}
			return time.Time{}
		}
		r := &Record{Scope: s1, Key: s2, State: uint8(flags >> 8), Fingerprint: s3, Token: u,
			LeaseEnds: when(0, at), ExpiresAt: at2, Retention: time.Duration(i1),
			FirstSeen: at, ClaimedAt: when(1, at2), DoneAt: when(2, at), Claims: int(i2),
			Checks: int(i1), NextCheck: when(3, at2), Attention: bit(4), MayHaveRunTwice: bit(11), Recovered: s3, Owner: s1,
			Replays: i1, LastReplay: when(5, at), Conflicts: i2, Mismatches: int64(u), LastRejection: at2}
		if bit(6) {
			r.Result = &Result{Status: int(i2), Body: body, Error: s2, Truncated: bit(7)}
			if bit(8) {
				r.Result.Header = map[string][]string{s1: {s2, s3}}
			}
		}
		for i := range int(flags>>9) % (maxAttempts + 2) {
			r.Attempts = append(r.Attempts, Attempt{Token: u + uint64(i), ClaimedAt: at, Owner: s1,
				EndedAt: when(10, at2), Outcome: s2, Reason: s3, Status: int(i1)})
		}
		checkCodec(t, r)
	})
}
