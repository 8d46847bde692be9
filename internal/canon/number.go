package canon

import "encoding/binary"

// maxExponent bounds the magnitude of a JSON number's exponent. Larger
// exponents are rejected rather than computed with arbitrary precision; the
// bound keeps exponent arithmetic far from int64 overflow.
const maxExponent = 1e18 - 1

// copyDigits copies the n <= 16 bytes at body[from:] to dst, in two words
// when the body has 16 bytes there: scan's copy of a number's digits.
func copyDigits(dst *[16]byte, body []byte, from, n int) {
	if from+16 <= len(body) {
		src := body[from : from+16]
		binary.LittleEndian.PutUint64(dst[:8], binary.LittleEndian.Uint64(src[:8]))
		binary.LittleEndian.PutUint64(dst[8:], binary.LittleEndian.Uint64(src[8:]))
		return
	}
	for k := range n {
		dst[k&15] = body[from+k]
	}
}

// byteAt returns body[i], or 0 past the end.
func byteAt(body []byte, i int) byte {
	if i < len(body) {
		return body[i]
	}
	return 0
}

// number is a JSON number taken apart. Its digits D are the integer part
// body[intStart:intEnd] followed by the fraction body[fracStart:fracEnd],
// and its value is ±D × 10^(exp - len(fraction)).
type number struct {
	neg                bool
	intStart, intEnd   int
	fracStart, fracEnd int
	exp                int64
	expTooBig          bool // the exponent exceeds maxExponent; exp is not set
}

// appendNumber appends the number starting at body[i] in its canonical form:
// sign, significant digits and the exponent of the last digit, so that every
// spelling of one decimal value encodes alike.
func appendNumber(b, body []byte, i int) ([]byte, int, error) {
	start := i
	num, i, err := parseNumber(body, i)
	if err != nil {
		return b, i, err
	}
	first, last := num.significant(body)
	if first > last {
		return append(b, tagZero), i, nil
	}
	if num.expTooBig {
		return b, i, invalid("exponent out of range at offset %d", start)
	}
	// The last significant digit is D[last], worth 10^(exp - len(fraction)
	// + (len(D)-1-last)) = 10^(exp + intLen-1-last).
	shift := int64(num.intEnd - num.intStart - 1 - last)
	e := num.exp + shift
	if (shift > 0 && e < num.exp) || (shift < 0 && e > num.exp) {
		return b, i, invalid("exponent out of range at offset %d", start)
	}
	b = appendDigitsTag(b, num.neg, last-first+1)
	b = num.appendDigits(b, body, first, last)
	return binary.AppendVarint(b, e), i, nil
}

// parseNumber takes apart the number at body[i], checking its grammar, and
// returns the offset after it.
func parseNumber(body []byte, i int) (number, int, error) {
	var num number
	num.neg = body[i] == '-'
	if num.neg {
		i++
	}
	// Integer part: 0 or a non-zero digit and more digits.
	num.intStart = i
	switch {
	case i < len(body) && body[i] == '0':
		i++
	case i < len(body) && '1' <= body[i] && body[i] <= '9':
		i = skipDigits(body, i+1)
	case i >= len(body):
		return num, i, errEnd(i)
	default:
		return num, i, errUnexpected(body, i)
	}
	num.intEnd = i
	num.fracStart, num.fracEnd = i, i
	if i < len(body) && body[i] == '.' {
		num.fracStart = i + 1
		i = skipDigits(body, num.fracStart)
		if i == num.fracStart {
			return num, i, invalid("no digits after the decimal point at offset %d", i)
		}
		num.fracEnd = i
	}
	if i < len(body) && (body[i] == 'e' || body[i] == 'E') {
		var err error
		if num.exp, num.expTooBig, i, err = parseExponent(body, i+1); err != nil {
			return num, i, err
		}
	}
	return num, i, nil
}

// parseExponent reads the signed exponent digits from body[i] on. Beyond
// maxExponent it reports tooBig rather than failing: a zero may have any
// exponent.
func parseExponent(body []byte, i int) (exp int64, tooBig bool, end int, err error) {
	neg := false
	if i < len(body) && (body[i] == '+' || body[i] == '-') {
		neg = body[i] == '-'
		i++
	}
	digits := i
	for ; i < len(body) && '0' <= body[i] && body[i] <= '9'; i++ {
		if exp > (maxExponent-int64(body[i]-'0'))/10 {
			tooBig = true
		} else {
			exp = exp*10 + int64(body[i]-'0')
		}
	}
	if i == digits {
		return 0, false, i, invalid("no digits in the exponent at offset %d", i)
	}
	if neg {
		exp = -exp
	}
	return exp, tooBig, i, nil
}

// digit returns D[k] (see number).
func (num *number) digit(body []byte, k int) byte {
	if intLen := num.intEnd - num.intStart; k >= intLen {
		return body[num.fracStart+k-intLen]
	}
	return body[num.intStart+k]
}

// significant returns the indexes in D of the first and last non-zero
// digits, or first > last when the number is zero.
func (num *number) significant(body []byte) (first, last int) {
	first, last = 0, num.intEnd-num.intStart+num.fracEnd-num.fracStart-1
	for first <= last && num.digit(body, first) == '0' {
		first++
	}
	if first > last {
		return first, last
	}
	for num.digit(body, last) == '0' {
		last--
	}
	return first, last
}

// appendDigitsTag appends the sign tag of a number of n significant digits.
func appendDigitsTag(b []byte, neg bool, n int) []byte {
	switch {
	case n <= maxShort && neg:
		return append(b, tagShortNegative|byte(n))
	case n <= maxShort:
		return append(b, tagShortPositive|byte(n))
	case neg:
		b = append(b, tagNegative)
	default:
		b = append(b, tagPositive)
	}
	return binary.AppendUvarint(b, uint64(n))
}

// appendDigits appends D[first:last+1].
func (num *number) appendDigits(b, body []byte, first, last int) []byte {
	intLen := num.intEnd - num.intStart
	switch {
	case last < intLen:
		return append(b, body[num.intStart+first:num.intStart+last+1]...)
	case first >= intLen:
		return append(b, body[num.fracStart+first-intLen:num.fracStart+last-intLen+1]...)
	}
	b = append(b, body[num.intStart+first:num.intEnd]...)
	return append(b, body[num.fracStart:num.fracStart+last-intLen+1]...)
}

func skipDigits(body []byte, i int) int {
	for i < len(body) && '0' <= body[i] && body[i] <= '9' {
		i++
	}
	return i
}
