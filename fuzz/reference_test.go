package fuzz

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestFingerprint_Reference runs checkReference over generated bodies,
// valid and slightly broken, so that every plain `go test` compares the
// fast paths with the reference implementation on shapes a short fuzzing
// run rarely reaches: strings on either side of the 8-, 16- and 32-byte
// boundaries, escapes anywhere, numbers in every spelling, repeated and
// reordered member names, truncations and byte flips.
func TestFingerprint_Reference(t *testing.T) {
	for _, body := range referenceEdges() {
		checkReference(t, []byte(body))
	}
	r := rand.New(rand.NewPCG(5, 5))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for range n {
		var sb strings.Builder
		genValue(r, &sb, 0)
		body := []byte(sb.String())
		checkReference(t, body)
		if len(body) == 0 {
			continue
		}
		switch r.IntN(4) {
		case 0: // truncate
			checkReference(t, body[:r.IntN(len(body))])
		case 1: // replace a byte
			b := append([]byte(nil), body...)
			b[r.IntN(len(b))] = "\"\\{}[]:,0a\x00\x80 e.-"[r.IntN(16)]
			checkReference(t, b)
		case 2: // replace a structural byte with another
			const structural = "{}[]:,\""
			b := append([]byte(nil), body...)
			var at []int
			for k, c := range b {
				if strings.IndexByte(structural, c) >= 0 {
					at = append(at, k)
				}
			}
			if len(at) > 0 {
				b[at[r.IntN(len(at))]] = structural[r.IntN(len(structural))]
				checkReference(t, b)
			}
		}
	}
}

var genNames = []string{
	"a", "b", "id", "qty", "sku", "tool", "amount", "currency", "payment_id",
	"abcdefg", "abcdefgh", "abcdefgi", "abcdefghijklmnop", "abcdefghijklmnoq",
	strings.Repeat("n", 31), strings.Repeat("n", 32), "\u00e9t\u00e9", "",
}

func genSpace(r *rand.Rand, sb *strings.Builder) {
	if r.IntN(4) == 0 {
		sb.WriteString([]string{" ", "\n", "\t ", "\r\n  "}[r.IntN(4)])
	}
}

func genValue(r *rand.Rand, sb *strings.Builder, depth int) {
	genSpace(r, sb)
	k := r.IntN(10)
	if depth > 4 && k >= 8 {
		k = r.IntN(8)
	}
	switch k {
	case 0:
		sb.WriteString([]string{"null", "true", "false"}[r.IntN(3)])
	case 1, 2, 3:
		genNumber(r, sb)
	case 4, 5, 6, 7:
		genString(r, sb, genText(r))
	case 8:
		sb.WriteByte('[')
		for i := range r.IntN(5) {
			if i > 0 {
				sb.WriteByte(',')
			}
			genValue(r, sb, depth+1)
		}
		genSpace(r, sb)
		sb.WriteByte(']')
	default:
		sb.WriteByte('{')
		for i := range r.IntN(maxGenMembers(r)) {
			if i > 0 {
				sb.WriteByte(',')
			}
			genSpace(r, sb)
			name := genNames[r.IntN(len(genNames))]
			if r.IntN(3) == 0 {
				name = genText(r)
			}
			genString(r, sb, name)
			genSpace(r, sb)
			sb.WriteByte(':')
			genValue(r, sb, depth+1)
		}
		genSpace(r, sb)
		sb.WriteByte('}')
	}
	genSpace(r, sb)
}

// maxGenMembers is mostly small, sometimes past the insertion-sort bound.
func maxGenMembers(r *rand.Rand) int {
	if r.IntN(10) == 0 {
		return 40
	}
	return 8
}

func genText(r *rand.Rand) string {
	n := r.IntN(20)
	if r.IntN(4) == 0 {
		n = r.IntN(70)
	}
	var sb strings.Builder
	for range n {
		switch r.IntN(20) {
		case 0:
			sb.WriteString("é")
		case 1:
			sb.WriteString("😀")
		case 2:
			sb.WriteString(`"`)
		case 3:
			sb.WriteByte(byte(r.IntN(0x20)))
		default:
			sb.WriteByte("abcxyz_-./ 0123456789ABC"[r.IntN(24)])
		}
	}
	return sb.String()
}

// genString writes s as a JSON string, escaping what must be escaped and,
// at random, other characters too, including lone surrogates.
func genString(r *rand.Rand, sb *strings.Builder, s string) {
	sb.WriteByte('"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\' || c < 0x20 || r.IntN(12) == 0:
			switch {
			case c == '"':
				sb.WriteString(`\"`)
			case c == '\n' && r.IntN(2) == 0:
				sb.WriteString(`\n`)
			case c > 0xFFFF:
				fmt.Fprintf(sb, `\u%04x\u%04X`, 0xD800+(c-0x10000)>>10, 0xDC00+(c-0x10000)&0x3FF)
			default:
				fmt.Fprintf(sb, `\u%04x`, c)
			}
		default:
			sb.WriteRune(c)
		}
		if r.IntN(60) == 0 {
			fmt.Fprintf(sb, `\u%04x`, 0xD800+r.IntN(0x800))
		}
	}
	sb.WriteByte('"')
}

func genNumber(r *rand.Rand, sb *strings.Builder) {
	if r.IntN(3) == 0 {
		sb.WriteByte('-')
	}
	digits := func(n int) {
		for range n {
			sb.WriteByte(byte('0' + r.IntN(10)))
		}
	}
	if r.IntN(5) == 0 {
		sb.WriteByte('0')
	} else {
		sb.WriteByte(byte('1' + r.IntN(9)))
		digits(r.IntN(6))
		switch r.IntN(10) {
		case 0:
			digits(30)
		case 1:
			digits(8 + r.IntN(12))
		}
		if r.IntN(4) == 0 {
			sb.WriteString("000")
		}
	}
	if r.IntN(3) == 0 {
		sb.WriteByte('.')
		digits(1 + r.IntN(4))
		if r.IntN(4) == 0 {
			digits(r.IntN(18))
		}
		if r.IntN(4) == 0 {
			sb.WriteString("00")
		}
	}
	if r.IntN(4) == 0 {
		sb.WriteString([]string{"e", "E", "e+", "e-", "E-"}[r.IntN(5)])
		digits(1 + r.IntN(3))
		if r.IntN(20) == 0 {
			digits(18)
		}
	}
}

// referenceEdges returns bodies at the edges of the fast paths: strings and
// digit runs on either side of 8, 16 and 32 bytes, followed by each kind of
// byte, far from and close to the end of the body.
func referenceEdges() []string {
	var out []string
	pad := `,"` + strings.Repeat("p", 40) + `"]`
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 30, 31, 32, 33} {
		text := strings.Repeat("x", n)
		digits := strings.Repeat("7", n)
		for _, tail := range []string{"", pad} {
			out = append(out,
				`["`+text+`"`+tail,
				`["`+text+`\n"`+tail,
				`["`+text+`é"`+tail,
				`["`+text+"\x01\""+tail,
				`["`+text+tail,
				`{"`+text+`":1,"`+text+`x":2}`+tail,
				`{"`+text+`" :1,"`+text+`":2}`+tail,
				`{"`+text+`"1}`+tail,
				`[1`+digits+tail,
				`[-1`+digits+tail,
				`[1`+digits+`0`+tail,
				`[1`+digits+`.5`+tail,
				`[1.`+digits+`5`+tail,
				`[1.`+digits+`50`+tail,
				`[1`+digits+`.`+digits+`3`+tail,
				`[1`+digits+`.`+digits+`3e1`+tail,
				`[0.`+digits+`1`+tail,
				`[-0`+tail, `[0`+tail, `[01`+tail, `[-01`+tail, `[0e1`+tail, `[-`+tail, `[1.`+tail,
				`[tru`+tail, `[true`+tail, `[fals`+tail, `[nul`+tail, `[nulll`+tail,
			)
		}
	}
	for ip := 1; ip <= 17; ip++ {
		for fp := 1; fp <= 17; fp++ {
			out = append(out, `[`+strings.Repeat("3", ip)+`.`+strings.Repeat("4", fp)+pad)
		}
	}
	return out
}
