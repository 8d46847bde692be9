package backend

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/codec"
	"github.com/vmihailenco/msgpack/v5"
)

// The codec's own tests (internal/codec) check the encoding against
// msgpack. These check the conversion from and to the API's types: that
// it carries every field, that the bytes are still format 1 as msgpack
// writes it for a Record, and Clone.

// testRecords are the bench records and records that set every field, or
// none, or hold empty but non-nil values.
func testRecords() map[string]*Record {
	rs := benchRecords()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	rs["full"] = &Record{Format: Format, Scope: "s", Key: "k", State: StateDone, Fingerprint: "fp",
		Token: 1, LeaseEnds: at, ExpiresAt: at.Add(time.Hour), Retention: time.Hour,
		Result: &Result{Status: 500, Header: map[string][]string{"A": {"1", "2"}, "Nil": nil, "Empty": {}},
			Body: []byte("body"), Error: "boom", Truncated: true},
		FirstSeen: at, ClaimedAt: at.Add(time.Second), DoneAt: at.Add(2 * time.Second), Claims: 3, Checks: 2,
		NextCheck: at.Add(time.Minute), Attention: true, MayHaveRunTwice: true, Recovered: "committed", Owner: "o",
		Attempts: []Attempt{{Token: 1, ClaimedAt: at, Owner: "o", EndedAt: at, Outcome: "released", Reason: "r", Status: 1},
			{Token: 2, ClaimedAt: at}, {Token: 3, ClaimedAt: at, Status: -1}},
		Replays: 4, LastReplay: at.Add(3 * time.Second), Conflicts: 5, Mismatches: 6, LastRejection: at.Add(4 * time.Second)}
	rs["bare"] = &Record{Format: Format, Key: "k", State: StateReleased}
	rs["empties"] = &Record{Format: Format, Key: "k", State: StateDone,
		Result: &Result{Header: map[string][]string{}, Body: []byte{}}, Attempts: []Attempt{}}
	return rs
}

// The codec's types mirror the API's: the same fields, in the same order
// and at the same offsets (asCodec relies on it), with the same msgpack
// tags (the format) and types.
func TestRecordCodec_MirrorsTypes(t *testing.T) {
	// Format versions the record's fields, which every backend
	// stores (pgstore per row); the embedded encoding may be newer (format
	// 2 seals format 1's map with a checksum and adds no field).
	if codec.Format < Format {
		t.Fatalf("Format is %d, the codec writes %d", Format, codec.Format)
	}
	same := map[reflect.Type]reflect.Type{
		reflect.TypeFor[State]():     reflect.TypeFor[uint8](),
		reflect.TypeFor[*Result]():   reflect.TypeFor[*codec.Result](),
		reflect.TypeFor[[]Attempt](): reflect.TypeFor[[]codec.Attempt](),
	}
	for api, c := range map[reflect.Type]reflect.Type{
		reflect.TypeFor[Record]():  reflect.TypeFor[codec.Record](),
		reflect.TypeFor[Result]():  reflect.TypeFor[codec.Result](),
		reflect.TypeFor[Attempt](): reflect.TypeFor[codec.Attempt](),
	} {
		if api.NumField() != c.NumField() {
			t.Fatalf("%s has %d fields, %s %d", api, api.NumField(), c, c.NumField())
		}
		if api.Size() != c.Size() {
			t.Fatalf("%s takes %d bytes, %s %d", api, api.Size(), c, c.Size())
		}
		for i := range api.NumField() {
			f, g := api.Field(i), c.Field(i)
			typ := f.Type
			if m, ok := same[typ]; ok {
				typ = m
			}
			if f.Name != g.Name || f.Tag.Get("msgpack") != g.Tag.Get("msgpack") || typ != g.Type || f.Offset != g.Offset {
				t.Errorf("%s.%s %s %q is %s.%s %s %q in the codec", api, f.Name, f.Type, f.Tag.Get("msgpack"),
					c, g.Name, g.Type, g.Tag.Get("msgpack"))
			}
		}
	}
}

// marshalRecord writes what msgpack writes for a Record (format 1), and
// DecodeRecord reads back what msgpack reads: no field is lost in the
// conversion.
func TestRecordCodec_ConvertsEveryField(t *testing.T) {
	full := reflect.ValueOf(*testRecords()["full"])
	for i := range full.NumField() {
		if full.Field(i).IsZero() {
			t.Fatalf("the full record leaves %s zero", full.Type().Field(i).Name)
		}
	}
	var sp RecordSpace // reused by every record: nothing of one may stay
	for name, r := range testRecords() {
		got, err := marshalRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		c := *r
		c.Format = codec.Format
		want, err := msgpack.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		want = sealRecord(want)
		if r.Result == nil || len(r.Result.Header) <= 1 {
			if !bytes.Equal(got, want) {
				t.Errorf("%s: encodings differ\n got %x\nwant %x", name, got, want)
			}
		} else if len(got) != len(want) {
			t.Errorf("%s: encodings differ in length: got %d, want %d", name, len(got), len(want))
		}
		dec, err := DecodeRecord(got)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var ref Record
		if err := msgpack.Unmarshal(got, &ref); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(dec, &ref) {
			t.Errorf("%s: decoded\n%+v\nmsgpack decodes\n%+v", name, dec, &ref)
		}
		if in, err := sp.Decode(got); err != nil || !reflect.DeepEqual(in, &ref) {
			t.Errorf("%s: decoded into a RecordSpace\n%+v (%v)\nmsgpack decodes\n%+v", name, in, err, &ref)
		}
	}
}

// A record written by format 1 stays readable, and corrupt bytes give
// ErrCorrupt.
func TestUnmarshalRecord_Formats(t *testing.T) {
	golden, err := os.ReadFile("../internal/codec/testdata/record-v1.msgpack")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := DecodeRecord(golden)
	if err != nil {
		t.Fatalf("a record written by format 1 must stay readable: %v", err)
	}
	var sp RecordSpace
	if in, err := sp.Decode(golden); err != nil || !reflect.DeepEqual(in, rec) {
		t.Fatalf("format 1 into a RecordSpace: %+v, %v; want %+v", in, err, rec)
	}
	if rec.Scope != "tenant-a" || rec.Key != "refund:order-123" || rec.State != StateDone || rec.Token != 7 ||
		rec.Result.Status != 201 || string(rec.Result.Body) != `{"refund":"re_1"}` ||
		!rec.ExpiresAt.Equal(time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("the golden record decodes as %+v", rec)
	}
	b, err := marshalRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	// It encodes again to the same map, of the current format, sealed.
	want := bytes.Clone(golden)
	want[4] = codec.Format // the value of "v": after the map length, the key and uint8
	if want = sealRecord(want); !bytes.Equal(b, want) {
		t.Fatalf("the golden record encodes again as\n%x, not\n%x", b, want)
	}

	for name, c := range map[string]struct {
		in     []byte
		reason string
	}{
		"empty":     {nil, "undecodable record"},
		"garbage":   {[]byte("not msgpack"), "undecodable record"},
		"truncated": {golden[:len(golden)/2], "undecodable record"},
		"not a map": {[]byte{0x93, 0x01, 0x02, 0x03}, "undecodable record"},
		"format 3":  {sealRecord(bytes.Replace(golden, []byte("\xa1v\xcc\x01"), []byte("\xa1v\xcc\x03"), 1)), "unknown format version 3"},
		"unsealed":  {bytes.Replace(golden, []byte("\xa1v\xcc\x01"), []byte("\xa1v\xcc\x02"), 1), "checksum mismatch"},
	} {
		_, err := DecodeRecord(c.in)
		if !errors.Is(err, ErrCorrupt) || !strings.HasPrefix(err.Error(), ErrCorrupt.Error()+": "+c.reason) {
			t.Errorf("%s: DecodeRecord = %v, want ErrCorrupt: %s", name, err, c.reason)
		}
		if _, err := sp.Decode(c.in); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: RecordSpace.Decode = %v, want ErrCorrupt", name, err)
		}
	}
}

// A record under a key or scope that the API refuses is corrupt: records
// are stored only under valid ones.
func TestUnmarshalRecord_RefusesMalformedKeys(t *testing.T) {
	for _, r := range []*Record{
		{Key: "", State: StateInProgress},
		{Key: "tab\t", State: StateInProgress},
		{Key: strings.Repeat("k", MaxKeyLen+1), State: StateInProgress},
		{Scope: strings.Repeat("s", MaxScopeLen+1), Key: "k", State: StateInProgress},
		{Scope: "\x00", Key: "k", State: StateInProgress},
	} {
		b, err := marshalRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeRecord(b); !errors.Is(err, ErrCorrupt) ||
			err.Error() != ErrCorrupt.Error()+": malformed scope or key" {
			t.Errorf("scope %q, key %q: DecodeRecord = %v", r.Scope, r.Key, err)
		}
	}
}

// encoded is r's encoding, to compare records whatever their times' zones
// and empty values.
func encoded(t *testing.T, r *Record) []byte {
	t.Helper()
	b, err := marshalRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRecord_Clone_SharesNothing(t *testing.T) {
	for name, r := range testRecords() {
		before := encoded(t, r)
		c := r.Clone()
		if !bytes.Equal(encoded(t, c), before) {
			t.Fatalf("%s: clone differs\n got %+v\nwant %+v", name, c, r)
		}
		// Change everything the clone holds that can be changed in place.
		if res := c.Result; res != nil {
			for i := range res.Body {
				res.Body[i]++
			}
			for k, vs := range res.Header {
				for i := range vs {
					vs[i] = "changed"
				}
				res.Header[k+"!"] = nil
			}
			*res = Result{Status: -1}
		}
		for i := range c.Attempts {
			c.Attempts[i] = Attempt{Token: 99}
		}
		c.Attempts = append(c.Attempts, Attempt{Token: 100})
		*c = Record{}
		if !bytes.Equal(encoded(t, r), before) {
			t.Fatalf("%s: changing a clone changed the original", name)
		}
	}
}

// benchRecords are records as the store writes them: a claim in progress,
// the same claim done with a small JSON body, and a done record as idemhttp
// saves it, with headers and a 1 KiB body after a released first claim.
func benchRecords() map[string]*Record {
	at := time.Date(2026, 3, 4, 5, 6, 7, 891_234_567, time.UTC)
	fp := "idemfp1-sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	owner := "host-7/2f1c9e7a"
	claim := &Record{Format: Format, Scope: "tenant-a", Key: "refund:order-123456", State: StateInProgress,
		Fingerprint: fp, Token: 123456, LeaseEnds: at.Add(30 * time.Second), Retention: 24 * time.Hour,
		FirstSeen: at, ClaimedAt: at, Claims: 1, Owner: owner,
		Attempts: []Attempt{{Token: 123456, ClaimedAt: at, Owner: owner}}}
	done := *claim
	done.State, done.Owner = StateDone, ""
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

// BenchmarkMarshalRecord measures the encoding of each bench record, with
// the conversion to the codec's types (internal/codec's BenchmarkMarshal
// compares the codec alone with msgpack).
func BenchmarkMarshalRecord(b *testing.B) {
	for _, name := range []string{"in_progress", "done", "http"} {
		r := benchRecords()[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := marshalRecord(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUnmarshalRecord measures the decoding of each bench record, with
// the conversion from the codec's types.
func BenchmarkUnmarshalRecord(b *testing.B) {
	for _, name := range []string{"in_progress", "done", "http"} {
		enc, err := marshalRecord(benchRecords()[name])
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeRecord(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRecord_Clone measures a clone of each bench record.
func BenchmarkRecord_Clone(b *testing.B) {
	for _, name := range []string{"in_progress", "done", "http"} {
		r := benchRecords()[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = r.Clone()
			}
		})
	}
}

// sealRecord appends the checksum that format 2 puts after the map.
func sealRecord(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

// marshalRecord is EncodeRecord with the error the tests' table expects.
func marshalRecord(r *Record) ([]byte, error) { return EncodeRecord(r), nil }
