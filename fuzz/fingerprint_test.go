package fuzz

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

const jsonType = "application/json"

// FuzzFingerprint checks Fingerprint against a reference built on
// encoding/json: it never panics; a body it accepts is valid JSON whose
// re-encoding (other member order, whitespace, escapes and number
// spellings) has the same fingerprint; and two bodies with the same
// fingerprint mean the same thing.
func FuzzFingerprint(f *testing.F) {
	for _, seed := range []string{
		``, `null`, `0`, `-0.0e+0`, `{"a":1,"b":[true,false,null]}`,
		`{"b":{"d":[1,2,{"f":"g","e":"h"}],"c":1.50},"a":"\u0041\/"}`,
		`"\ud83d\ude00 \u00e9 \n \" \\"`, `12345678901234567890`, `1e400`, `10e-1`,
		`{"a":1,"\u0061":2}`, `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
		`{"a":`, "\xef\xbb\xbf{}", "\x00\xff", `"\ud800"`,
		// Realistic bodies, to mutate into the shapes the fast paths take.
		`{"tool":"payments.refund","arguments":{"payment_id":"pay_3NqKx8Lz2vR9","amount":{"value":"129.95",` +
			`"currency":"EUR"},"reason":"duplicate_charge","items":[{"sku":"SKU-10023","qty":2,"price":49.99},` +
			`{"sku":"SKU-20411","qty":1,"price":29.97}],"notify":true,"metadata":{"ticket":"CS-88412"}},"dry_run":false}`,
		"{\n  \"order_id\": \"ord_8f14e45fceea167a\",\n  \"items\": [ {\"qty\": 2, \"unit_price\": \"12.50\"} ],\n" +
			"  \"note\": \"customer \\u00e9mail confirmed\", \"step\": -7.25, \"idempotent\": null\n}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkReference(t, body)
		if _, err := (idem.Fingerprinter{}).Sum("POST", "/fuzz", "application/octet-stream", body); err != nil && len(body) <= idem.DefaultMaxBodyBytes {
			t.Fatalf("opaque body rejected: %v", err)
		}
		sum, err := idem.Fingerprinter{}.Sum("POST", "/fuzz", jsonType, body)
		if err != nil {
			if !isFingerprintError(err) {
				t.Fatalf("unexpected error %v", err)
			}
			if len(body) == 0 {
				t.Fatalf("empty body rejected: %v", err)
			}
			return
		}
		again, err := idem.Fingerprinter{}.Sum("POST", "/fuzz", jsonType, body)
		if err != nil || again != sum {
			t.Fatalf("not deterministic: %s, then %s, %v", sum, again, err)
		}
		if len(body) == 0 {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted a body encoding/json rejects: %q", body)
		}
		if hasSurrogateEscape(body) {
			// encoding/json turns lone surrogates into U+FFFD, which
			// Fingerprint keeps apart on purpose; the reference cannot
			// speak for these bodies.
			return
		}

		v, ok := decode(body)
		if !ok {
			return
		}
		re := reencode(v, fnvSeed(body))
		got, err := idem.Fingerprinter{MaxBytes: 1 << 30}.Sum("POST", "/fuzz", jsonType, re)
		if err != nil || got != sum {
			t.Fatalf("re-encoding changed the fingerprint (%v):\n%s\n%s", err, body, re)
		}

		for _, m := range mutations(body) {
			msum, err := idem.Fingerprinter{}.Sum("POST", "/fuzz", jsonType, m)
			if err != nil || msum != sum || hasSurrogateEscape(m) {
				continue
			}
			mv, ok := decode(m)
			if !ok {
				continue
			}
			if eq, known := equal(v, mv); known && !eq {
				t.Fatalf("different meanings share a fingerprint:\n%s\n%s", body, m)
			}
		}
	})
}

// checkReference checks that Fingerprint returns what the reference
// implementation in fingerprint_ref_test.go returns for body, byte for byte
// but for the algorithm's name,
// errors and their messages included, under the default bounds and under
// tight ones.
func checkReference(t *testing.T, body []byte) {
	t.Helper()
	for _, f := range []struct {
		idem idem.Fingerprinter
		ref  refFingerprinter
	}{
		{},
		{idem.Fingerprinter{MaxBytes: 64, MaxDepth: 3}, refFingerprinter{MaxBytes: 64, MaxDepth: 3}},
	} {
		for _, ct := range []string{jsonType, "application/octet-stream"} {
			got, err := f.idem.Sum("POST", "/fuzz", ct, body)
			want, werr := f.ref.Sum("POST", "/fuzz", ct, body)
			// idemfp2 is idemfp1 but for the name when no media-type
			// parameter matters, as for these types.
			want = strings.Replace(want, idem.PreviousFingerprintAlgorithm+":", idem.FingerprintAlgorithm+":", 1)
			if got != want || fmt.Sprint(err) != fmt.Sprint(werr) {
				t.Fatalf("%+v %s %q:\ngot  %s, %v\nwant %s, %v", f.idem, ct, body, got, err, want, werr)
			}
			for _, target := range []error{idem.ErrInvalidJSON, idem.ErrDuplicateMember, idem.ErrBodyTooDeep, idem.ErrBodyTooLarge} {
				if errors.Is(err, target) != errors.Is(werr, target) {
					t.Fatalf("%+v %s %q: error %v, reference %v", f.idem, ct, body, err, werr)
				}
			}
		}
	}
}

func isFingerprintError(err error) bool {
	for _, target := range []error{idem.ErrInvalidJSON, idem.ErrDuplicateMember, idem.ErrBodyTooDeep, idem.ErrBodyTooLarge} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

var surrogateEscape = regexp.MustCompile(`\\u[dD][89a-fA-F]`)

func hasSurrogateEscape(b []byte) bool { return surrogateEscape.Match(b) }

// decode is the reference decoder: encoding/json with numbers kept as
// their literals.
func decode(b []byte) (any, bool) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}

func fnvSeed(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// reencode writes v again with member order shuffled by a seed, numbers
// spelled differently but equal (a fraction digit or an exponent added),
// strings escaped by encoding/json (which escapes <, > and &) and extra
// whitespace.
func reencode(v any, seed uint64) []byte {
	var buf bytes.Buffer
	var n uint64 = seed
	var write func(v any)
	write = func(v any) {
		n = n*6364136223846793005 + 1442695040888963407
		if n>>62 == 0 {
			buf.WriteString(" \n")
		}
		switch v := v.(type) {
		case nil:
			buf.WriteString("null")
		case bool:
			buf.WriteString(strconv.FormatBool(v))
		case json.Number:
			buf.WriteString(respell(string(v), n>>63 == 0))
		case string:
			s, _ := json.Marshal(v)
			buf.Write(s)
		case []any:
			buf.WriteByte('[')
			for i, e := range v {
				if i > 0 {
					buf.WriteByte(',')
				}
				write(e)
			}
			buf.WriteByte(']')
		case map[string]any:
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			// A deterministic order unrelated to the original one.
			slices.SortFunc(keys, func(a, b string) int {
				ha, hb := fnvSeed([]byte(a))^n, fnvSeed([]byte(b))^n
				if ha != hb {
					if ha < hb {
						return -1
					}
					return 1
				}
				return strings.Compare(a, b)
			})
			buf.WriteByte('{')
			for i, k := range keys {
				if i > 0 {
					buf.WriteByte(',')
				}
				s, _ := json.Marshal(k)
				buf.Write(s)
				buf.WriteString(" : ")
				write(v[k])
			}
			buf.WriteByte('}')
		default:
			panic(fmt.Sprintf("unexpected %T", v))
		}
	}
	write(v)
	return buf.Bytes()
}

// respell returns another spelling of the JSON number lit with the same
// value: a zero fraction digit, and optionally a zero exponent.
func respell(lit string, addExponent bool) string {
	mant, exp := lit, ""
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		mant, exp = lit[:i], lit[i:]
	}
	if strings.Contains(mant, ".") {
		mant += "0"
	} else {
		mant += ".0"
	}
	if exp == "" && addExponent {
		exp = "E+0"
	}
	return mant + exp
}

// mutations derives bodies close to b: each deletes, duplicates, swaps or
// replaces one byte, or inserts a space, at a few positions.
func mutations(b []byte) [][]byte {
	var out [][]byte
	for _, p := range []int{0, len(b) / 3, len(b) / 2, len(b) - 1} {
		if p < 0 || p >= len(b) {
			continue
		}
		out = append(out,
			slices.Concat(b[:p], b[p+1:]),
			slices.Concat(b[:p+1], b[p:]),
			slices.Concat(b[:p], []byte{' '}, b[p:]),
		)
		if p+1 < len(b) {
			s := slices.Clone(b)
			s[p], s[p+1] = s[p+1], s[p]
			out = append(out, s)
		}
		for _, c := range []byte{'0', '1', 'a', '"'} {
			if b[p] != c {
				s := slices.Clone(b)
				s[p] = c
				out = append(out, s)
			}
		}
	}
	return out
}

// equal is the reference meaning: structural equality with numbers compared
// as exact rationals. known is false when a number is too large to compare
// cheaply.
func equal(a, b any) (eq, known bool) {
	switch a := a.(type) {
	case nil, bool, string:
		return a == b, true
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false, true
		}
		ra, oka := rat(string(a))
		rb, okb := rat(string(b))
		if !oka || !okb {
			return false, false
		}
		return ra.Cmp(rb) == 0, true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false, true
		}
		known = true
		for i := range a {
			eq, k := equal(a[i], b[i])
			if k && !eq {
				return false, true
			}
			known = known && k
		}
		return true, known
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false, true
		}
		known = true
		for k, va := range a {
			vb, ok := b[k]
			if !ok {
				return false, true
			}
			eq, kn := equal(va, vb)
			if kn && !eq {
				return false, true
			}
			known = known && kn
		}
		return true, known
	}
	panic(fmt.Sprintf("unexpected %T", a))
}

// rat parses a JSON number literal exactly, refusing exponents beyond
// 10000 in magnitude, which would make big.Rat slow.
func rat(lit string) (*big.Rat, bool) {
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(lit[i+1:], "+"))
		if err != nil || e > 10000 || e < -10000 {
			return nil, false
		}
	}
	r, ok := new(big.Rat).SetString(lit)
	return r, ok
}
