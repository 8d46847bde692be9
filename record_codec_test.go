package idem

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// The codec's tests compare it with the reference of record_ref_test.go
// (msgpack by reflection, as format 1 was written before the codec) on
// generated records and on fuzzed bytes and fields.

// edgeInts are the integers on either side of every boundary between two
// msgpack integer forms.
var edgeInts = []int64{
	0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
	-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64,
}

// edgeSecs are Unix seconds on either side of the boundaries between the
// timestamp's 4-, 8- and 12-byte forms, before 1970 and far ahead.
var edgeSecs = []int64{
	0, 1, 1<<32 - 1, 1 << 32, 1<<34 - 1, 1 << 34, -1, -86400 * 365,
	-62135596800,     // 0001-01-01, the zero time's instant
	-62135596800 - 1, // before the zero time
	253402300799,     // 9999-12-31
	1 << 40,
}

// edgeLens are string and byte string lengths on either side of the
// boundaries between their forms.
var edgeLens = []int{0, 1, 31, 32, 255, 256, 65535, 65536}

// genInt returns an edge integer or one of a random bit length.
func genInt(rng *rand.Rand) int64 {
	if rng.IntN(2) == 0 {
		return edgeInts[rng.IntN(len(edgeInts))]
	}
	v := int64(rng.Uint64() >> rng.IntN(64))
	if rng.IntN(2) == 0 {
		v = -v
	}
	return v
}

// genTime returns the zero time or a time with or without nanoseconds, in
// any of the timestamp's forms, in UTC, a fixed zone or with a monotonic
// reading.
func genTime(rng *rand.Rand) time.Time {
	var sec int64
	switch rng.IntN(5) {
	case 0:
		return time.Time{}
	case 1:
		sec = edgeSecs[rng.IntN(len(edgeSecs))]
	case 2:
		sec = 1_700_000_000 + rng.Int64N(1e9) // 2023 to 2055
	default:
		sec = rng.Int64N(1<<36) - 1<<35 - 62135596800/2 // 1000 BC to 3100
	}
	var nsec int64
	if rng.IntN(2) == 0 {
		nsec = rng.Int64N(1e9)
	}
	t := time.Unix(sec, nsec)
	switch rng.IntN(4) {
	case 0:
		t = t.UTC()
	case 1:
		t = t.In(time.FixedZone("x", -5*3600))
	case 2:
		if rng.IntN(8) == 0 {
			t = time.Now() // with a monotonic reading
		}
	}
	return t
}

// genLen returns a length: mostly short, sometimes an edge one.
func genLen(rng *rand.Rand) int {
	if rng.IntN(3) == 0 {
		n := edgeLens[rng.IntN(len(edgeLens))]
		if n > 256 && rng.IntN(4) != 0 {
			n = 256 // keep most records small
		}
		return n
	}
	return rng.IntN(40)
}

// genString returns a string of any bytes, or, if printable, of printable
// ASCII (a valid key, if not empty and short enough).
func genString(rng *rand.Rand, printable bool) string {
	b := make([]byte, genLen(rng))
	for i := range b {
		if printable {
			b[i] = byte(' ' + rng.IntN(95))
		} else {
			b[i] = byte(rng.Uint32())
		}
	}
	return string(b)
}

// genRecord returns a record with every field varied over the forms its
// encoding takes: zero and non-zero times in each form, integers at each
// boundary, strings and bodies of each length class, headers, and 0 to
// MaxAttempts+2 attempts. Most have a valid key, scope and state, so that
// UnmarshalRecord accepts them.
func genRecord(rng *rand.Rand) *Record {
	valid := rng.IntN(8) != 0
	r := &Record{
		Format:        uint8(rng.IntN(3)),
		Scope:         genString(rng, valid),
		Key:           genString(rng, valid),
		State:         State(1 + rng.IntN(3)),
		Fingerprint:   genString(rng, false),
		Token:         uint64(genInt(rng)),
		LeaseEnds:     genTime(rng),
		ExpiresAt:     genTime(rng),
		Retention:     time.Duration(genInt(rng)),
		FirstSeen:     genTime(rng),
		ClaimedAt:     genTime(rng),
		DoneAt:        genTime(rng),
		Claims:        int(genInt(rng)),
		NextCheck:     genTime(rng),
		Attention:     rng.IntN(2) == 0,
		LastReplay:    genTime(rng),
		LastRejection: genTime(rng),
	}
	if valid && (len(r.Key) == 0 || len(r.Key) > MaxKeyLen) {
		r.Key = "k"
	}
	if valid && len(r.Scope) > MaxScopeLen {
		r.Scope = ""
	}
	if !valid {
		r.State = State(rng.IntN(256))
	}
	if rng.IntN(2) == 0 {
		r.Checks = int(genInt(rng))
		r.Recovered = genString(rng, false)
		r.Owner = genString(rng, false)
		r.Replays, r.Conflicts, r.Mismatches = genInt(rng), genInt(rng), genInt(rng)
	}
	if r.State == StateDone || rng.IntN(3) == 0 {
		r.Result = genResult(rng)
	}
	n := rng.IntN(MaxAttempts + 3)
	if rng.IntN(2) == 0 {
		n = rng.IntN(3)
	}
	for range n {
		a := Attempt{Token: uint64(genInt(rng)), ClaimedAt: genTime(rng)}
		if rng.IntN(2) == 0 {
			a.Owner, a.EndedAt, a.Outcome = genString(rng, false), genTime(rng), genString(rng, false)
			a.Reason, a.Status = genString(rng, false), int(genInt(rng))
		}
		r.Attempts = append(r.Attempts, a)
	}
	if n == 0 && rng.IntN(2) == 0 {
		r.Attempts = []Attempt{} // empty, not nil: omitted too
	}
	return r
}

// genResult returns a result, empty or with any of its fields, headers of
// zero, one or several names with nil, empty or several values.
func genResult(rng *rand.Rand) *Result {
	res := &Result{}
	if rng.IntN(4) == 0 {
		return res
	}
	res.Status = int(genInt(rng))
	if rng.IntN(3) == 0 {
		res.Status = 200 + rng.IntN(300)
	}
	res.Error = genString(rng, false)
	res.Truncated = rng.IntN(2) == 0
	switch rng.IntN(4) {
	case 0:
		res.Body = []byte{} // empty, not nil: omitted too
	case 1:
		res.Body = []byte(genString(rng, false))
	case 2:
		res.Body = make([]byte, edgeLens[rng.IntN(len(edgeLens))])
		for i := range res.Body {
			res.Body[i] = byte(i)
		}
	}
	switch rng.IntN(4) {
	case 0:
		res.Header = map[string][]string{} // empty, not nil: omitted too
	case 1, 2:
		res.Header = make(map[string][]string)
		for range 1 + rng.IntN(3)*rng.IntN(10) {
			var vs []string
			switch rng.IntN(4) {
			case 0: // nil
			case 1:
				vs = []string{}
			default:
				for range 1 + rng.IntN(3) {
					vs = append(vs, genString(rng, false))
				}
			}
			res.Header[genString(rng, false)] = vs
		}
	}
	return res
}

// decoded returns what decoding r's encoding gives: format 1, times as
// time.Unix builds them (the zero time in UTC), and empty bodies, headers
// and attempts left out.
func decoded(r *Record) *Record {
	c := *r
	c.Format = RecordFormat
	for _, t := range []*time.Time{&c.LeaseEnds, &c.ExpiresAt, &c.FirstSeen, &c.ClaimedAt,
		&c.DoneAt, &c.NextCheck, &c.LastReplay, &c.LastRejection} {
		*t = decodedTime(*t)
	}
	if r.Result != nil {
		res := *r.Result
		if len(res.Body) == 0 {
			res.Body = nil
		}
		if len(res.Header) == 0 {
			res.Header = nil
		}
		c.Result = &res
	}
	c.Attempts = nil
	for _, a := range r.Attempts {
		a.ClaimedAt, a.EndedAt = decodedTime(a.ClaimedAt), decodedTime(a.EndedAt)
		c.Attempts = append(c.Attempts, a)
	}
	return &c
}

func decodedTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.Unix(t.Unix(), int64(t.Nanosecond()))
}

// checkCodec checks r's encoding against the reference: the same bytes
// (up to the order of header names), a fast decode with no fallback to
// msgpack that gives what msgpack decodes and what r holds, and
// UnmarshalRecord agreeing with the reference's.
func checkCodec(t *testing.T, r *Record) {
	t.Helper()
	got, err := MarshalRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	want, err := marshalRecordReflect(r)
	if err != nil {
		t.Fatal(err)
	}
	if cap(got) != len(got) {
		t.Fatalf("encoding of %d bytes in a buffer of %d: recordSize is off", len(got), cap(got))
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
	fast, ok := decodeRecord(scratch)
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
	again, _ := MarshalRecord(fast)
	if !bytes.Equal(again, got) {
		t.Fatal("re-encoding a decoded record changes its bytes")
	}
	checkDecode(t, got)
}

// checkDecode checks that UnmarshalRecord and the reference decode b to
// the same record, or both fail with ErrCorrupt; and that whatever the
// fast decoder accepts, msgpack decodes to the same record. Where
// checkMsgpack refuses b, msgpack must fail on it: the reference is run
// then only if b holds no code for a str32, bin32, ext32, array32 or map32,
// whose length could have msgpack allocate gigabytes first, or grow its
// pooled buffer by a mebibyte for good (see record_msgpack.go).
func checkDecode(t *testing.T, b []byte) {
	t.Helper()
	scratch := bytes.Clone(b)
	got, err := UnmarshalRecord(scratch)
	for i := range scratch {
		scratch[i] = 0xc1 // the record must hold none of it
	}
	if err != nil && !errors.Is(err, ErrCorrupt) {
		t.Fatalf("decode error does not wrap ErrCorrupt: %v", err)
	}
	if !checkMsgpack(b) {
		if err == nil {
			t.Fatalf("UnmarshalRecord decodes %x, which checkMsgpack refuses", b)
		}
		if !slices.ContainsFunc(b, func(c byte) bool {
			return c == mpStr32 || c == mpBin32 || c == mpExt32 || c == mpArray32 || c == mpMap32
		}) {
			if _, werr := unmarshalRecordReflect(b); werr == nil {
				t.Fatalf("checkMsgpack refuses %x, which msgpack decodes", b)
			}
		}
		return
	}
	want, werr := unmarshalRecordReflect(b)
	switch {
	case (err == nil) != (werr == nil):
		t.Fatalf("UnmarshalRecord(%x) = %v, the reference %v", b, err, werr)
	case !reflect.DeepEqual(got, want):
		t.Fatalf("UnmarshalRecord(%x) differs from the reference\n got %+v\nwant %+v", b, got, want)
	}
	if fast, ok := decodeRecord(b); ok {
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

func TestRecordCodec_Reference_Generated(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() {
		n = 300
	}
	for i := range n {
		r := genRecord(rng)
		checkCodec(t, r)
		if t.Failed() {
			t.Fatalf("record %d", i)
		}
	}
}

// Every field at each edge of its encoding's forms, one field class at a
// time, so that no edge depends on the generator's luck.
func TestRecordCodec_Reference_Edges(t *testing.T) {
	base := func() *Record {
		at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
		return &Record{Scope: "s", Key: "k", State: StateDone, Fingerprint: "fp", Token: 1,
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
		r.Scope, r.Fingerprint, r.Recovered, r.Owner = s, s, s, s
		if n > 0 && n <= MaxKeyLen {
			r.Key = s
		}
		r.Result.Body, r.Result.Error = []byte(s), s
		r.Result.Header = map[string][]string{s: {s, s}}
		a := &r.Attempts[0]
		a.Owner, a.Outcome, a.Reason = s, s, s
		checkCodec(t, r)
	}
	for n := range MaxAttempts + 2 {
		r := base()
		for i := range n {
			r.addAttempt(Attempt{Token: uint64(i + 2), ClaimedAt: r.ClaimedAt, Outcome: "completed"})
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
	if _, ok := decodeRecord(golden); !ok {
		t.Fatal("the fast decoder refuses the golden record")
	}
	checkDecode(t, golden)
}

// Forms that msgpack reads and the fast decoder leaves to it: the record
// decodes the same either way.
func TestUnmarshalRecord_OtherForms(t *testing.T) {
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
		"deep":                     append([]byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa1z"), bytes.Repeat([]byte{0x91}, 20000)...),
		"wide format":              []byte("\x84\xa1v\xcf\x00\x00\x00\x00\x00\x00\x01\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07"),
		"negative claims":          []byte("\x85\xa1v\x01\xa1k\xa1a\xa2st\x01\xa2tk\x07\xa2cl\xd0\x80"),
	} {
		t.Run(name, func(t *testing.T) { checkDecode(t, b) })
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

func TestRecord_Clone_SharesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		r := genRecord(rng)
		before := decoded(r)
		c := r.Clone()
		if !reflect.DeepEqual(decoded(c), before) {
			t.Fatalf("clone differs\n got %+v\nwant %+v", c, r)
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
		c.addAttempt(Attempt{Token: 100})
		*c = Record{}
		if !reflect.DeepEqual(decoded(r), before) {
			t.Fatalf("changing a clone changed the original")
		}
	}
}

// FuzzRecordDecode feeds arbitrary bytes to UnmarshalRecord and to the
// reference: both give the same record or both an error wrapping
// ErrCorrupt; and whatever the fast decoder accepts, msgpack decodes to the
// same record.
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
		b, _ := MarshalRecord(r)
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
		r := &Record{Scope: s1, Key: s2, State: State(flags >> 8), Fingerprint: s3, Token: u,
			LeaseEnds: when(0, at), ExpiresAt: at2, Retention: time.Duration(i1),
			FirstSeen: at, ClaimedAt: when(1, at2), DoneAt: when(2, at), Claims: int(i2),
			Checks: int(i1), NextCheck: when(3, at2), Attention: bit(4), Recovered: s3, Owner: s1,
			Replays: i1, LastReplay: when(5, at), Conflicts: i2, Mismatches: int64(u), LastRejection: at2}
		if bit(6) {
			r.Result = &Result{Status: int(i2), Body: body, Error: s2, Truncated: bit(7)}
			if bit(8) {
				r.Result.Header = map[string][]string{s1: {s2, s3}}
			}
		}
		for i := range int(flags>>9) % (MaxAttempts + 2) {
			r.Attempts = append(r.Attempts, Attempt{Token: u + uint64(i), ClaimedAt: at, Owner: s1,
				EndedAt: when(10, at2), Outcome: s2, Reason: s3, Status: int(i1)})
		}
		checkCodec(t, r)
	})
}

// benchRecords are records as the store writes them: a claim in progress,
// the same claim done with a small JSON body, and a done record as idemhttp
// saves it, with headers and a 1 KiB body after a released first claim.
func benchRecords() map[string]*Record {
	at := time.Date(2026, 3, 4, 5, 6, 7, 891_234_567, time.UTC)
	fp := "idemfp1-sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	owner := "host-7/2f1c9e7a"
	claim := &Record{Format: RecordFormat, Scope: "tenant-a", Key: "refund:order-123456", State: StateInProgress,
		Fingerprint: fp, Token: 123456, LeaseEnds: at.Add(30 * time.Second), Retention: 24 * time.Hour,
		FirstSeen: at, ClaimedAt: at, Claims: 1, Owner: owner,
		Attempts: []Attempt{{Token: 123456, ClaimedAt: at, Owner: owner}}}
	done := claim.Clone()
	done.State, done.Owner = StateDone, ""
	done.Result = &Result{Status: 201, Body: []byte(`{"refund":"re_123","amount":4200}`)}
	done.DoneAt, done.ExpiresAt = at.Add(40*time.Millisecond), at.Add(24*time.Hour)
	done.endAttempt(123456, Ending{At: done.DoneAt, Outcome: "completed", Status: 201})
	http := done.Clone()
	http.Result.Header = map[string][]string{"Content-Type": {"application/json"}, "Location": {"/refunds/re_123"}}
	http.Result.Body = bytes.Repeat([]byte(`{"k":"v"},`), 100)
	http.Claims = 2
	http.Attempts = append([]Attempt{{Token: 123000, ClaimedAt: at.Add(-time.Minute), Owner: owner,
		EndedAt: at.Add(-time.Minute / 2), Outcome: "released", Reason: "effect failed: 503"}}, http.Attempts...)
	return map[string]*Record{"in_progress": claim, "done": done, "http": http}
}

// BenchmarkMarshalRecord compares the codec (MarshalRecord) with msgpack by
// reflection (the reference, as format 1 was written before).
func BenchmarkMarshalRecord(b *testing.B) {
	for _, name := range []string{"in_progress", "done", "http"} {
		r := benchRecords()[name]
		for _, enc := range []struct {
			name string
			fn   func(*Record) ([]byte, error)
		}{{"codec", MarshalRecord}, {"msgpack", marshalRecordReflect}} {
			b.Run(name+"/"+enc.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := enc.fn(r); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkUnmarshalRecord compares the codec (UnmarshalRecord) with
// msgpack by reflection (the reference, as format 1 was read before).
func BenchmarkUnmarshalRecord(b *testing.B) {
	for _, name := range []string{"in_progress", "done", "http"} {
		enc, err := MarshalRecord(benchRecords()[name])
		if err != nil {
			b.Fatal(err)
		}
		for _, dec := range []struct {
			name string
			fn   func([]byte) (*Record, error)
		}{{"codec", UnmarshalRecord}, {"msgpack", unmarshalRecordReflect}} {
			b.Run(name+"/"+dec.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := dec.fn(enc); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
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
