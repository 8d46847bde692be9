package codec

import (
	"math"
	"math/rand/v2"
	"time"
)

// The tests compare the codec with the reference of ref_test.go (msgpack
// by reflection, as format 1 was written before the codec) on records that
// these functions generate, and on fuzzed bytes and fields.

// maxAttempts is idem.MaxAttempts: the longest story a record keeps.
const maxAttempts = 16

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
// ASCII (as keys are).
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
// maxAttempts+2 attempts. Most have a known state, so that Unmarshal accepts
// them.
func genRecord(rng *rand.Rand) *Record {
	valid := rng.IntN(8) != 0
	r := &Record{
		Format:          uint8(rng.IntN(3)),
		Scope:           genString(rng, valid),
		Key:             genString(rng, valid),
		State:           uint8(1 + rng.IntN(3)),
		Fingerprint:     genString(rng, false),
		Token:           uint64(genInt(rng)),
		LeaseEnds:       genTime(rng),
		ExpiresAt:       genTime(rng),
		Retention:       time.Duration(genInt(rng)),
		FirstSeen:       genTime(rng),
		ClaimedAt:       genTime(rng),
		DoneAt:          genTime(rng),
		Claims:          int(genInt(rng)),
		NextCheck:       genTime(rng),
		Attention:       rng.IntN(2) == 0,
		MayHaveRunTwice: rng.IntN(2) == 0,
		LastReplay:      genTime(rng),
		LastRejection:   genTime(rng),
	}
	if !valid {
		r.State = uint8(rng.IntN(256))
	}
	if rng.IntN(2) == 0 {
		r.Checks = int(genInt(rng))
		r.Recovered = genString(rng, false)
		r.Owner = genString(rng, false)
		r.Replays, r.Conflicts, r.Mismatches = genInt(rng), genInt(rng), genInt(rng)
	}
	if r.State == stateDone || rng.IntN(3) == 0 {
		r.Result = genResult(rng)
	}
	n := rng.IntN(maxAttempts + 3)
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
	c.Format = Format
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
