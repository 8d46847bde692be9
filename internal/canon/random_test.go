package canon

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// TestScan_RandomBodies checks scan against step on generated bodies:
// random trees with members out of order, duplicate names, deep nesting,
// long and exact numbers, escapes and invalid bytes, whole, cut short and
// with a byte replaced.
func TestScan_RandomBodies(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() {
		n = 300
	}
	for range n {
		body := randomJSON(rng, 0)
		checkScan(t, body, 64)
		checkScan(t, body, 4)
		checkScan(t, body[:rng.IntN(len(body)+1)], 64)
		if len(body) > 0 {
			m := bytes.Clone(body)
			const bytesToPut = "\"{}[],:\\x\xff\x00 1"
			m[rng.IntN(len(m))] = bytesToPut[rng.IntN(len(bytesToPut))]
			checkScan(t, m, 64)
		}
	}
}

// randomJSON returns a random JSON value nested depth deep so far.
func randomJSON(rng *rand.Rand, depth int) []byte {
	k := rng.IntN(10)
	if depth > 6 {
		k = rng.IntN(6)
	}
	switch k {
	case 0:
		return []byte([]string{"null", "true", "false", " null "}[rng.IntN(4)])
	case 1, 2:
		return randomNumber(rng)
	case 3, 4, 5:
		return randomString(rng)
	case 6:
		var b []byte
		b = append(b, '[')
		for i := range rng.IntN(5) {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, randomJSON(rng, depth+1)...)
		}
		return append(b, ']')
	}
	var b []byte
	b = append(b, '{')
	names := rng.IntN(20 >> min(depth, 4))
	for i := range names {
		if i > 0 {
			b = append(b, ", "[:1+rng.IntN(2)]...)
		}
		b = append(b, randomString(rng)...)
		b = append(b, ':')
		b = append(b, randomJSON(rng, depth+1)...)
	}
	return append(b, '}')
}

// randomString returns a JSON string: a short name (often repeated, so
// that objects hold duplicates), escapes, long text or invalid bytes.
func randomString(rng *rand.Rand) []byte {
	switch rng.IntN(8) {
	case 0:
		return []byte(`"` + strings.Repeat("n", rng.IntN(40)) + `"`)
	case 1:
		return []byte([]string{`"\u0061"`, `"\ud83d\ude00"`, `"\ud800"`, `"a\nb\"\\\/"`, `"é"`, "\"\xff\"", "\"\x01\"", `"\u00e9"`}[rng.IntN(8)])
	}
	return []byte(`"` + string(rune('a'+rng.IntN(8))) + strings.Repeat("x", rng.IntN(3)) + `"`)
}

// randomNumber returns a JSON number: small, long, with a fraction or an
// exponent, zero in its spellings, or out of range.
func randomNumber(rng *rand.Rand) []byte {
	switch rng.IntN(6) {
	case 0:
		return []byte(strconv.Itoa(rng.IntN(2000) - 1000))
	case 1:
		return []byte(strings.Repeat("9", 1+rng.IntN(40)) + "." + strings.Repeat("0", rng.IntN(3)) + "1")
	case 2:
		return []byte([]string{"-0", "0.0", "-0.0e+0", "0e99999999999999999999", "1e1000000000000000000", "1E-5", "12.50"}[rng.IntN(7)])
	}
	return []byte(strconv.FormatFloat(rng.NormFloat64()*1e6, 'g', -1, 64))
}
