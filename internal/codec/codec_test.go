package codec

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// checkCodec checks r's encoding against the reference: the same bytes
// (up to the order of header names), a fast decode with no fallback to
// msgpack that gives what msgpack decodes and what r holds, and
// Unmarshal agreeing with the reference's.
func checkCodec(t *testing.T, r *Record) {
	t.Helper()
	got := Marshal(r)
	want, err := marshalReflect(r)
	if err != nil {
		t.Fatal(err)
	}
	if cap(got) != len(got) {
		t.Fatalf("encoding of %d bytes in a buffer of %d: Size is off", len(got), cap(got))
	}
	if r.Result == nil || len(r.Result.Header) <= 1 {
		if !bytes.Equal(got, want) {
			t.Fatalf("encodings differ\n got %x\nwant %x", got, want)
		}
	} else if len(got) != len(want) {
		t.Fatalf("encodings differ in length: got %d, want %d", len(got), len(want))
	}
	var ref Record
	if err := msgpack.Unmarshal(want, &ref); err != nil {
		t.Fatal(err)
	}
	// Decode from a copy that is overwritten afterwards: the record must
	// hold none of it.
	scratch := bytes.Clone(got)
	fast, ok := decodeFast(scratch, nil)
	if !ok {
		t.Fatalf("the fast decoder refused the encoding %x", got)
	}
	for i := range scratch {
		scratch[i] = 0xc1
	}
	if !reflect.DeepEqual(fast, &ref) {
		t.Fatalf("fast decode differs from msgpack's\n got %+v\nwant %+v", fast, &ref)
	}
	if !reflect.DeepEqual(fast, decoded(r)) {
		t.Fatalf("decode(encode(r)) differs from r\n got %+v\nwant %+v", fast, decoded(r))
	}
	if again := Marshal(fast); !bytes.Equal(again, got) {
		t.Fatal("re-encoding a decoded record changes its bytes")
	}
	checkDecode(t, got)
}

// checkDecode checks that Unmarshal and the reference decode b to the
// same record, or both fail (Unmarshal with a *CorruptError); and that whatever
// the fast decoder accepts, msgpack decodes to the same record. Where
// checkMsgpack refuses b, msgpack must fail on it: the reference is run
// then only if b holds no code for a str32, bin32, ext32, array32 or
// map32, whose length could have msgpack allocate gigabytes first, or grow
// its pooled buffer by a mebibyte for good (see fallback.go).
func checkDecode(t *testing.T, b []byte) {
	t.Helper()
	scratch := bytes.Clone(b)
	got, err := Unmarshal(scratch)
	for i := range scratch {
		scratch[i] = 0xc1 // the record must hold none of it
	}
	var ce *CorruptError
	if err != nil && !errors.As(err, &ce) {
		t.Fatalf("decode error is not a *CorruptError: %v", err)
	}
	// Into a space that holds another record (every field, a result with
	// a header, one attempt): the same answer, nothing of the other left.
	sp := new(Space)
	if _, err := UnmarshalInto(Marshal(benchRecords()["http"]), sp); err != nil {
		t.Fatal(err)
	}
	if _, err := UnmarshalInto(Marshal(benchRecords()["done"]), sp); err != nil {
		t.Fatal(err)
	}
	scratch = bytes.Clone(b)
	into, ierr := UnmarshalInto(scratch, sp)
	for i := range scratch {
		scratch[i] = 0xc1
	}
	if (ierr == nil) != (err == nil) || (err == nil && !reflect.DeepEqual(into, got)) {
		t.Fatalf("UnmarshalInto(%x) = %+v, %v; Unmarshal %+v, %v", b, into, ierr, got, err)
	}
	if !checkMsgpack(b) {
		if err == nil {
			t.Fatalf("Unmarshal decodes %x, which checkMsgpack refuses", b)
		}
		if !slices.ContainsFunc(b, func(c byte) bool {
			return c == mpStr32 || c == mpBin32 || c == mpExt32 || c == mpArray32 || c == mpMap32
		}) {
			if _, werr := unmarshalReflect(b); werr == nil {
				t.Fatalf("checkMsgpack refuses %x, which msgpack decodes", b)
			}
		}
		return
	}
	want, werr := unmarshalReflect(b)
	switch {
	case (err == nil) != (werr == nil):
		t.Fatalf("Unmarshal(%x) = %v, the reference %v", b, err, werr)
	case !reflect.DeepEqual(got, want):
		t.Fatalf("Unmarshal(%x) differs from the reference\n got %+v\nwant %+v", b, got, want)
	}
	if fast, ok := decodeFast(b, nil); ok {
		var ref Record
		if err := unmarshalMsgpack(b, &ref); err != nil {
			t.Fatalf("the fast decoder accepts %x, msgpack refuses it: %v", b, err)
		}
		if !reflect.DeepEqual(fast, &ref) {
			t.Fatalf("fast decode of %x differs from msgpack's\n got %+v\nwant %+v", b, fast, &ref)
		}
	}
}

// unmarshalMsgpack is msgpack.Unmarshal with its panics as errors.
func unmarshalMsgpack(b []byte, r *Record) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return msgpack.Unmarshal(b, r)
}

func TestCodec_Reference_Generated(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() {
		n = 300
	}
	for i := range n {
		r := genRecord(rng)
		checkCodec(t, r)
		if r.Result != nil {
			checkResultCodec(t, r.Result) // the same map, encoded alone
		}
		if t.Failed() {
			t.Fatalf("record %d", i)
		}
	}
}

// Every field at each edge of its encoding's forms, one field class at a
// time, so that no edge depends on the generator's luck.
func TestCodec_Reference_Edges(t *testing.T) {
	base := func() *Record {
		at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
		return &Record{Scope: "s", Key: "k", State: stateDone, Fingerprint: "fp", Token: 1,
			LeaseEnds: at, ExpiresAt: at, FirstSeen: at, ClaimedAt: at, Claims: 1,
			Result:   &Result{Status: 201, Body: []byte("{}")},
			Attempts: []Attempt{{Token: 1, ClaimedAt: at}}}
	}
	checkCodec(t, &Record{})
	checkCodec(t, &Record{Result: &Result{}, Attempts: []Attempt{{}}})
	for _, v := range edgeInts {
		r := base()
		r.Token, r.Retention, r.Claims, r.Checks = uint64(v), time.Duration(v), int(v), int(v)
		r.Replays, r.Conflicts, r.Mismatches = v, v, v
		r.Result.Status, r.Attempts[0].Token, r.Attempts[0].Status = int(v), uint64(v), int(v)
		checkCodec(t, r)
	}
	for _, sec := range edgeSecs {
		for _, nsec := range []int64{0, 1, 999_999_999} {
			at := time.Unix(sec, nsec)
			r := base()
			r.LeaseEnds, r.ExpiresAt, r.FirstSeen, r.ClaimedAt, r.DoneAt = at, at, at, at, at
			r.NextCheck, r.LastReplay, r.LastRejection = at, at, at
			r.Attempts[0].ClaimedAt, r.Attempts[0].EndedAt = at, at
			checkCodec(t, r)
		}
	}
	for _, n := range edgeLens {
		s := strings.Repeat("x", n)
		r := base()
		r.Scope, r.Key, r.Fingerprint, r.Recovered, r.Owner = s, s, s, s, s
		r.Result.Body, r.Result.Error = []byte(s), s
		r.Result.Header = map[string][]string{s: {s, s}}
		a := &r.Attempts[0]
		a.Owner, a.Outcome, a.Reason = s, s, s
		checkCodec(t, r)
	}
	for n := range maxAttempts + 2 {
		r := base()
		for i := range n {
			r.Attempts = append(r.Attempts, Attempt{Token: uint64(i + 2), ClaimedAt: r.ClaimedAt, Outcome: "completed"})
		}
		checkCodec(t, r)
	}
	r := base()
	r.Result.Header = map[string][]string{"Content-Type": {"application/json"}, "Nil": nil, "Empty": {}}
	checkCodec(t, r)
	golden, err := os.ReadFile("testdata/record-v1.msgpack")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := decodeFast(golden, nil); !ok {
		t.Fatal("the fast decoder refuses the golden record")
	}
	checkDecode(t, golden)
}

// Forms that msgpack reads and the fast decoder leaves to it: the record
// decodes the same either way.
func TestUnmarshal_OtherForms(t *testing.T) {
	ok := []byte("\x84\xa1v\xcc\x01\xa1k\xa1a\xa2st\xcc\x01\xa2tk\xcf\x00\x00\x00\x00\x00\x00\x00\x07")
	for name, b := range map[string][]byte{
		"canonical":                ok,
		"compact ints":             []byte("\x84\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07"),
		"unknown field":            []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa3new\x93\x01\x02\x03"),
		"field twice":              []byte("\x85\xa1v\x01\xa1k\xa1a\xa1k\xa1b\xa2st\x01\xa2tk\x07"),
		"nil string":               []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa2ow\xc0"),
		"str8 key":                 []byte("\x84\xd9\x01v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07"),
		"bin string":               []byte("\x84\xa1v\x01\xa1k\xc4\x01a\xa2st\x01\xa2tk\x07"),
		"as array":                 append([]byte("\xdc\x00\x19\xcc\x01\xa0\xa1a\xcc\x01"), bytes.Repeat([]byte{0xc0}, 21)...),
		"trailing bytes":           append(ok[:len(ok):len(ok)], 0xc1, 0xc1),
		"nil result":               []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa1r\xc0"),
		"ext16 time":               []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa2le\xc8\x00\x04\xff\x00\x00\x00\x01"),
		"nil time":                 []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa2le\xc0"),
		"attempt nil":              []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa1a\x91\xc0"),
		"header nil":               []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa1r\x81\xa1h\xc0"),
		"header twice":             []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa1r\x81\xa1h\x82\xa1X\x91\xa11\xa1X\x91\xa12"),
		"empty body":               []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa1r\x81\xa1b\xc4\x00"),
		"empty attempts":           []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa1a\x90"),
		"empty header":             []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa1r\x81\xa1h\x80"),
		"huge attempts":            []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa1a\xdd\xff\xff\xff\xff"),
		"huge body":                []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa1r\x81\xa1b\xc6\xff\xff\xff\xf0"),
		"huge attempts, canonical": []byte("\x86\xa1v\xcc\x01\xa1k\xa1a\xa2st\xcc\x01\xa2tk\xcf\x00\x00\x00\x00\x00\x00\x00\x07\xa1a\xdd\xff\xff\xff\xff"),
		"ext for header":           []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa1r\x81\xa1h\xd4\x05\x81\xa1X\xc0"),
		"ext8 for header":          []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa1r\x81\xa1h\xc7\x00\x05\x81\xa1X\xc0"),
		"deep":                     append([]byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa1z"), bytes.Repeat([]byte{0x91}, 20000)...),
		"unknown scalars":          []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa1z\x95\xca\x00\x00\x00\x00\xcb\x00\x00\x00\x00\x00\x00\x00\x00\xd1\x00\x01\xd6\x05\x00\x00\x00\x00\xc7\x01\x05\x00"),
		"wide format":              []byte("\x84\xa1v\xcf\x00\x00\x00\x00\x00\x00\x01\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07"),
		"negative claims":          []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa2cl\xd0\x80"),
	} {
		t.Run(name, func(t *testing.T) { checkDecode(t, b) })
	}
}

// What the format does not allow, Unmarshal refuses with a reason.
func TestUnmarshal_Refuses(t *testing.T) {
	golden, err := os.ReadFile("testdata/record-v1.msgpack")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	enc := func(format, state uint8, res *Result) []byte {
		b, err := msgpack.Marshal(&Record{Format: format, Key: "k", State: state, LeaseEnds: at, Result: res})
		if err != nil {
			t.Fatal(err)
		}
		return seal(b)
	}
	sealed := enc(Format, stateInProgress, nil)
	flipped := bytes.Clone(sealed)
	flipped[len(flipped)/2] ^= 0x10
	for name, c := range map[string]struct {
		in     []byte
		reason string
	}{
		"empty":               {nil, "undecodable record"},
		"garbage":             {[]byte("not msgpack"), "undecodable record"},
		"truncated":           {golden[:len(golden)/2], "undecodable record"},
		"not a map":           {[]byte{0x93, 0x01, 0x02, 0x03}, "undecodable record"},
		"format 0":            {enc(0, stateInProgress, nil), "unknown format version 0"},
		"newer format":        {enc(Format+1, stateInProgress, nil), fmt.Sprintf("unknown format version %d", Format+1)},
		"unsealed":            {sealed[:len(sealed)-4], "checksum mismatch"},
		"a bit flipped":       {flipped, "checksum mismatch"},
		"state 0":             {enc(Format, 0, nil), "unknown state 0"},
		"state 4":             {enc(Format, 4, &Result{}), "unknown state 4"},
		"done without result": {enc(Format, stateDone, nil), "done record without a result"},
	} {
		r, err := Unmarshal(c.in)
		var ce *CorruptError
		if r != nil || !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: Unmarshal = %v, %v, want a *CorruptError", name, r, err)
		}
		if !strings.HasPrefix(ce.Reason, c.reason) {
			t.Errorf("%s: reason %q, want %q", name, ce.Reason, c.reason)
		}
	}
}

// The layouts that checkMsgpack walks are the structs' as msgpack sees
// them: their tag names, in struct order, and kinds by Go type.
func TestMsgpackLayouts_MatchStructTags(t *testing.T) {
	kinds := map[reflect.Type]mpKind{
		reflect.TypeFor[string]():              mpKindString,
		reflect.TypeFor[bool]():                mpKindBool,
		reflect.TypeFor[time.Time]():           mpKindTime,
		reflect.TypeFor[[]byte]():              mpKindBytes,
		reflect.TypeFor[*Result]():             mpKindResult,
		reflect.TypeFor[[]Attempt]():           mpKindAttempts,
		reflect.TypeFor[map[string][]string](): mpKindHeader,
	}
	for _, c := range []struct {
		typ    reflect.Type
		layout []mpField
	}{
		{reflect.TypeFor[Record](), recordLayout()},
		{reflect.TypeFor[Result](), resultLayout()},
		{reflect.TypeFor[Attempt](), attemptLayout()},
	} {
		var want []mpField
		for f := range c.typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
			kind, ok := kinds[f.Type]
			if !ok {
				switch f.Type.Kind() {
				case reflect.Int, reflect.Int64, reflect.Uint8, reflect.Uint64:
					kind = mpKindInt
				default:
					t.Fatalf("%s.%s: no kind for %s", c.typ, f.Name, f.Type)
				}
			}
			want = append(want, mpField{name, kind})
		}
		if !slices.Equal(c.layout, want) {
			t.Errorf("layout of %s is\n%v\nits struct tags give\n%v", c.typ, c.layout, want)
		}
	}
}

// TestUnmarshal_EveryBitFlipIsRefused flips each bit of a record in turn:
// the checksum refuses every one, so no damaged record reads as another.
func TestUnmarshal_EveryBitFlipIsRefused(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	enc := Marshal(&Record{Format: Format, Scope: "s", Key: "k", State: stateDone, Fingerprint: "fp", Token: 7,
		LeaseEnds: at, ExpiresAt: at, Result: &Result{Status: 200, Body: []byte("the body"), Header: map[string][]string{"A": {"b"}}},
		FirstSeen: at, ClaimedAt: at, DoneAt: at, Claims: 1, Attempts: []Attempt{{Token: 7, ClaimedAt: at, Outcome: "done"}}})
	if _, err := Unmarshal(enc); err != nil {
		t.Fatal(err)
	}
	for i := range len(enc) * 8 {
		b := bytes.Clone(enc)
		b[i/8] ^= 1 << (i % 8)
		if r, err := Unmarshal(b); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("bit %d flipped: Unmarshal = %+v, %v, want ErrCorrupt", i, r, err)
		}
	}
}
