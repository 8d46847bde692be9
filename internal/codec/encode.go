package codec

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"slices"
	"time"
)

// Marshal encodes r in format Format, whatever r.Format says, in one
// allocation of its exact size. The bytes are described in
// docs/record-format.md.
func Marshal(r *Record) []byte {
	return Append(make([]byte, 0, Size(r)), r)
}

// recordFields counts the fields of r's map: the 12 always written and
// the omitempty ones that are not empty.
func recordFields(r *Record) int {
	n := 12 // v sc k st fp tk le ex rt fs ca cl
	n += b2i(r.Result != nil) + b2i(!r.DoneAt.IsZero()) + b2i(r.Checks != 0) +
		b2i(!r.NextCheck.IsZero()) + b2i(r.Attention) + b2i(r.MayHaveRunTwice) + b2i(r.Recovered != "") +
		b2i(r.Owner != "") + b2i(len(r.Attempts) > 0) + b2i(r.Replays != 0) +
		b2i(!r.LastReplay.IsZero()) + b2i(r.Conflicts != 0) + b2i(r.Mismatches != 0) +
		b2i(!r.LastRejection.IsZero())
	return n
}

// resultFields counts the fields of res's map, all omitempty.
func resultFields(res *Result) int {
	return b2i(res.Status != 0) + b2i(len(res.Header) > 0) + b2i(len(res.Body) > 0) +
		b2i(res.Error != "") + b2i(res.Truncated)
}

// attemptFields counts the fields of a's map: t and c, and the omitempty
// ones that are not empty.
func attemptFields(a *Attempt) int {
	return 2 + b2i(a.Owner != "") + b2i(!a.EndedAt.IsZero()) + b2i(a.Outcome != "") +
		b2i(a.Reason != "") + b2i(a.Status != 0)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Size is the exact length of r's encoding. It follows Append field by
// field; a test checks that the two agree.
func Size(r *Record) int {
	n := sumLen + lenSize(recordFields(r)) +
		2 + 2 + // v
		3 + strSize(len(r.Scope)) +
		2 + strSize(len(r.Key)) +
		3 + 2 + // st
		3 + strSize(len(r.Fingerprint)) +
		3 + 9 + // tk
		3 + timeSize(r.LeaseEnds) +
		3 + timeSize(r.ExpiresAt) +
		3 + 9 + // rt
		3 + timeSize(r.FirstSeen) +
		3 + timeSize(r.ClaimedAt) +
		3 + intSize(int64(r.Claims))
	if res := r.Result; res != nil {
		n += 2 + lenSize(resultFields(res))
		if res.Status != 0 {
			n += 2 + intSize(int64(res.Status))
		}
		if len(res.Header) > 0 {
			n += 2 + lenSize(len(res.Header))
			for k, vs := range res.Header {
				n += strSize(len(k))
				if vs == nil {
					n++
					continue
				}
				n += lenSize(len(vs))
				for _, v := range vs {
					n += strSize(len(v))
				}
			}
		}
		if len(res.Body) > 0 {
			n += 2 + binSize(len(res.Body))
		}
		if res.Error != "" {
			n += 2 + strSize(len(res.Error))
		}
		if res.Truncated {
			n += 2 + 1
		}
	}
	if !r.DoneAt.IsZero() {
		n += 3 + timeSize(r.DoneAt)
	}
	if r.Checks != 0 {
		n += 3 + intSize(int64(r.Checks))
	}
	if !r.NextCheck.IsZero() {
		n += 3 + timeSize(r.NextCheck)
	}
	if r.Attention {
		n += 3 + 1
	}
	if r.MayHaveRunTwice {
		n += 3 + 1
	}
	if r.Recovered != "" {
		n += 3 + strSize(len(r.Recovered))
	}
	if r.Owner != "" {
		n += 3 + strSize(len(r.Owner))
	}
	if len(r.Attempts) > 0 {
		n += 2 + lenSize(len(r.Attempts))
		for i := range r.Attempts {
			a := &r.Attempts[i]
			n += lenSize(attemptFields(a)) + 2 + 9 + 2 + timeSize(a.ClaimedAt)
			if a.Owner != "" {
				n += 2 + strSize(len(a.Owner))
			}
			if !a.EndedAt.IsZero() {
				n += 2 + timeSize(a.EndedAt)
			}
			if a.Outcome != "" {
				n += 2 + strSize(len(a.Outcome))
			}
			if a.Reason != "" {
				n += 2 + strSize(len(a.Reason))
			}
			if a.Status != 0 {
				n += 2 + intSize(int64(a.Status))
			}
		}
	}
	if r.Replays != 0 {
		n += 3 + 9
	}
	if !r.LastReplay.IsZero() {
		n += 3 + timeSize(r.LastReplay)
	}
	if r.Conflicts != 0 {
		n += 3 + 9
	}
	if r.Mismatches != 0 {
		n += 3 + 9
	}
	if !r.LastRejection.IsZero() {
		n += 3 + timeSize(r.LastRejection)
	}
	return n
}

// sumLen is the length of the checksum after the map.
const sumLen = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Append appends r's encoding to b, with Format as its format: the map,
// then its checksum.
func Append(b []byte, r *Record) []byte {
	start := len(b)
	b = appendMap(b, r)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// appendMap appends r's map, with Format as its format.
func appendMap(b []byte, r *Record) []byte {
	b = appendMapLen(b, recordFields(r))
	b = append(b, "\xa1v"...)
	b = append(b, mpUint8, Format)
	b = appendStr(append(b, "\xa2sc"...), r.Scope)
	b = appendStr(append(b, "\xa1k"...), r.Key)
	b = append(b, "\xa2st"...)
	b = append(b, mpUint8, byte(r.State))
	b = appendStr(append(b, "\xa2fp"...), r.Fingerprint)
	b = appendUint64(append(b, "\xa2tk"...), r.Token)
	b = appendTime(append(b, "\xa2le"...), r.LeaseEnds)
	b = appendTime(append(b, "\xa2ex"...), r.ExpiresAt)
	b = appendInt64(append(b, "\xa2rt"...), int64(r.Retention))
	if res := r.Result; res != nil {
		b = appendResult(append(b, "\xa1r"...), res)
	}
	b = appendTime(append(b, "\xa2fs"...), r.FirstSeen)
	b = appendTime(append(b, "\xa2ca"...), r.ClaimedAt)
	if !r.DoneAt.IsZero() {
		b = appendTime(append(b, "\xa2da"...), r.DoneAt)
	}
	b = appendInt(append(b, "\xa2cl"...), int64(r.Claims))
	if r.Checks != 0 {
		b = appendInt(append(b, "\xa2ck"...), int64(r.Checks))
	}
	if !r.NextCheck.IsZero() {
		b = appendTime(append(b, "\xa2nc"...), r.NextCheck)
	}
	if r.Attention {
		b = append(b, "\xa2at\xc3"...)
	}
	if r.MayHaveRunTwice {
		b = append(b, "\xa2tw\xc3"...)
	}
	if r.Recovered != "" {
		b = appendStr(append(b, "\xa2rc"...), r.Recovered)
	}
	if r.Owner != "" {
		b = appendStr(append(b, "\xa2ow"...), r.Owner)
	}
	if len(r.Attempts) > 0 {
		b = appendArrayLen(append(b, "\xa1a"...), len(r.Attempts))
		for i := range r.Attempts {
			b = appendAttempt(b, &r.Attempts[i])
		}
	}
	if r.Replays != 0 {
		b = appendInt64(append(b, "\xa2rp"...), r.Replays)
	}
	if !r.LastReplay.IsZero() {
		b = appendTime(append(b, "\xa2lr"...), r.LastReplay)
	}
	if r.Conflicts != 0 {
		b = appendInt64(append(b, "\xa2cf"...), r.Conflicts)
	}
	if r.Mismatches != 0 {
		b = appendInt64(append(b, "\xa2mm"...), r.Mismatches)
	}
	if !r.LastRejection.IsZero() {
		b = appendTime(append(b, "\xa2lj"...), r.LastRejection)
	}
	return b
}

// AppendResult appends the encoding of res alone, the map a record holds
// under "r": what msgpack.Marshal writes for a Result (its omitempty
// fields, in another order and with the smallest integer forms), and what
// UnmarshalResult and msgpack read.
func AppendResult(b []byte, res *Result) []byte { return appendResult(b, res) }

// appendResult appends res's map.
func appendResult(b []byte, res *Result) []byte {
	b = appendMapLen(b, resultFields(res))
	if res.Status != 0 {
		b = appendInt(append(b, "\xa1s"...), int64(res.Status))
	}
	if len(res.Header) > 0 {
		b = appendHeader(append(b, "\xa1h"...), res.Header)
	}
	if len(res.Body) > 0 {
		b = appendBin(append(b, "\xa1b"...), res.Body)
	}
	if res.Error != "" {
		b = appendStr(append(b, "\xa1e"...), res.Error)
	}
	if res.Truncated {
		b = append(b, "\xa1t\xc3"...)
	}
	return b
}

// appendAttempt appends the map of one attempt.
func appendAttempt(b []byte, a *Attempt) []byte {
	b = appendMapLen(b, attemptFields(a))
	b = appendUint64(append(b, "\xa1t"...), a.Token)
	b = appendTime(append(b, "\xa1c"...), a.ClaimedAt)
	if a.Owner != "" {
		b = appendStr(append(b, "\xa1o"...), a.Owner)
	}
	if !a.EndedAt.IsZero() {
		b = appendTime(append(b, "\xa1e"...), a.EndedAt)
	}
	if a.Outcome != "" {
		b = appendStr(append(b, "\xa1x"...), a.Outcome)
	}
	if a.Reason != "" {
		b = appendStr(append(b, "\xa1r"...), a.Reason)
	}
	if a.Status != 0 {
		b = appendInt(append(b, "\xa1s"...), int64(a.Status))
	}
	return b
}

// appendHeader appends a non-empty header map, its names in sorted order.
func appendHeader(b []byte, h map[string][]string) []byte {
	b = appendMapLen(b, len(h))
	var buf [16]string
	names := buf[:0]
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		b = appendStr(b, k)
		vs := h[k]
		if vs == nil {
			b = append(b, mpNil)
			continue
		}
		b = appendArrayLen(b, len(vs))
		for _, v := range vs {
			b = appendStr(b, v)
		}
	}
	return b
}

// lenSize is the length of a map or array header for n elements.
func lenSize(n int) int {
	switch {
	case n < 16:
		return 1
	case n <= math.MaxUint16:
		return 3
	default:
		return 5
	}
}

func appendMapLen(b []byte, n int) []byte {
	return appendLen(b, n, mpFixMap, mpMap16, mpMap32)
}

func appendArrayLen(b []byte, n int) []byte {
	return appendLen(b, n, mpFixArray, mpArray16, mpArray32)
}

// appendLen appends the head of a map or an array of n elements: the fix
// form below 16, else the 16- or 32-bit one.
func appendLen(b []byte, n int, fix, c16, c32 byte) []byte {
	switch {
	case n < 16:
		return append(b, fix|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, c16), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, c32), uint32(n))
	}
}

// strSize is the encoded length of a string of n bytes.
func strSize(n int) int {
	switch {
	case n < 32:
		return 1 + n
	case n <= math.MaxUint8:
		return 2 + n
	case n <= math.MaxUint16:
		return 3 + n
	default:
		return 5 + n
	}
}

// appendStr appends s as a msgpack string. Like msgpack's, its length is
// cut to 32 bits (strings over 4 GiB are not encodable).
func appendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, mpFixStr|byte(n))
	case n <= math.MaxUint8:
		b = append(b, mpStr8, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, mpStr16), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, mpStr32), uint32(n))
	}
	return append(b, s...)
}

// binSize is the encoded length of a byte string of n bytes.
func binSize(n int) int {
	switch {
	case n <= math.MaxUint8:
		return 2 + n
	case n <= math.MaxUint16:
		return 3 + n
	default:
		return 5 + n
	}
}

// appendBin appends p as msgpack bin.
func appendBin(b []byte, p []byte) []byte {
	switch n := len(p); {
	case n <= math.MaxUint8:
		b = append(b, mpBin8, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, mpBin16), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, mpBin32), uint32(n))
	}
	return append(b, p...)
}

func appendUint64(b []byte, v uint64) []byte {
	return binary.BigEndian.AppendUint64(append(b, mpUint64), v)
}

func appendInt64(b []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(append(b, mpInt64), uint64(v))
}

// intSize is the length of v in its smallest form (see appendInt).
func intSize(v int64) int {
	if v >= 0 {
		switch {
		case v <= math.MaxInt8:
			return 1
		case v <= math.MaxUint8:
			return 2
		case v <= math.MaxUint16:
			return 3
		case v <= math.MaxUint32:
			return 5
		}
		return 9
	}
	switch {
	case v >= -32:
		return 1
	case v >= math.MinInt8:
		return 2
	case v >= math.MinInt16:
		return 3
	case v >= math.MinInt32:
		return 5
	}
	return 9
}

// appendInt appends v in the smallest form, as msgpack does for an int:
// a positive fixint or an unsigned form for v >= 0, a negative fixint or a
// signed form below.
func appendInt(b []byte, v int64) []byte {
	if v >= 0 {
		switch {
		case v <= math.MaxInt8:
			return append(b, byte(v))
		case v <= math.MaxUint8:
			return append(b, mpUint8, byte(v))
		case v <= math.MaxUint16:
			return binary.BigEndian.AppendUint16(append(b, mpUint16), uint16(v))
		case v <= math.MaxUint32:
			return binary.BigEndian.AppendUint32(append(b, mpUint32), uint32(v))
		}
		return appendUint64(b, uint64(v))
	}
	switch {
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, mpInt8, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, mpInt16), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, mpInt32), uint32(v))
	}
	return appendInt64(b, v)
}

// timeSize is the encoded length of t (see appendTime).
func timeSize(t time.Time) int {
	secs := uint64(t.Unix())
	switch {
	case secs>>34 != 0:
		return 3 + 12
	case t.Nanosecond() == 0 && secs>>32 == 0:
		return 2 + 4
	default:
		return 2 + 8
	}
}

// appendTime appends t as msgpack's timestamp extension (type -1), as
// msgpack v5 writes it: 4 bytes of seconds when they fit 32 bits and there
// are no nanoseconds, 8 bytes of 30-bit nanoseconds and 34-bit seconds
// when the seconds fit 34 bits (1970 to 2514), else 12 bytes of 32-bit
// nanoseconds and 64-bit seconds. The zero time is in the 12-byte form.
func appendTime(b []byte, t time.Time) []byte {
	secs := uint64(t.Unix())
	if secs>>34 == 0 {
		data := uint64(t.Nanosecond())<<34 | secs
		if data>>32 == 0 {
			return binary.BigEndian.AppendUint32(append(b, mpFixExt4, mpTimeExt), uint32(data))
		}
		return binary.BigEndian.AppendUint64(append(b, mpFixExt8, mpTimeExt), data)
	}
	b = append(b, mpExt8, 12, mpTimeExt)
	b = binary.BigEndian.AppendUint32(b, uint32(t.Nanosecond()))
	return binary.BigEndian.AppendUint64(b, secs)
}
