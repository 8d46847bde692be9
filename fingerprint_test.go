package idem_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"mime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem"
)

const jsonType = "application/json"

// fp fingerprints a JSON body for a fixed method and route.
func fp(tb testing.TB, body string) string {
	tb.Helper()
	got, err := idem.Fingerprinter{}.Sum("POST", "/v1/refunds", jsonType, []byte(body))
	require.NoError(tb, err, "body %q", body)
	return got
}

func TestFingerprint_Format(t *testing.T) {
	got := fp(t, `{"a":1}`)
	prefix := idem.FingerprintAlgorithm + ":"
	require.True(t, strings.HasPrefix(got, prefix), got)
	digest := strings.TrimPrefix(got, prefix)
	require.Len(t, digest, 2*sha256.Size)
	require.Equal(t, strings.ToLower(digest), digest)
	for _, c := range digest {
		require.True(t, strings.ContainsRune("0123456789abcdef", c), got)
	}
}

// TestFingerprint_Golden pins a few digests: stored fingerprints must keep
// matching, so any change to the canonical encoding must come with a new
// FingerprintAlgorithm name instead of breaking these. idemfp2 kept
// idemfp1's hex digests for requests without a meaningful media-type
// parameter (the first three); the last ones are new in idemfp2.
func TestFingerprint_Golden(t *testing.T) {
	tests := []struct {
		method, route, contentType, body, want string
	}{
		{"POST", "/v1/refunds", jsonType, `{"amount":{"value":"12.50","currency":"EUR"},"items":[1,2.5,-3e2,true,null]}`,
			"idemfp2-sha256:b34625d071c59f816f5633e2e04c18eca42a44ac14ba47d0e6a22bd4130ba899"},
		{"PUT", "/v1/items/7", "text/plain; charset=utf-8", "hello, world",
			"idemfp2-sha256:cef412729637eb77c605a772a9195d904f3d5c60a7516bb32a2c36766fde78cc"},
		{"DELETE", "/v1/items/7", jsonType, "",
			"idemfp2-sha256:82dc85d7430e97e5fe8d989df24a68ae01112ef3b77231c0985d4a293813861d"},
		{"POST", "/upload", "multipart/form-data; boundary=AaB03x", "--AaB03x\r\n--AaB03x--",
			"idemfp2-sha256:a8004a2e5f2df02af7b5263c0abb8fdc6b63f0923be9554bdb8de3769076ff66"},
		{"PUT", "/v1/items/7", "text/plain; charset=ISO-8859-1", "caf\xe9",
			"idemfp2-sha256:edb366611a25c1a284c4982d7229f8290f143bc156b3ba085c5c5b4e845fe30c"},
	}
	for _, tt := range tests {
		got, err := idem.Fingerprinter{}.Sum(tt.method, tt.route, tt.contentType, []byte(tt.body))
		require.NoError(t, err)
		require.Equal(t, tt.want, got, "%s %s %q", tt.method, tt.route, tt.body)
	}
}

// TestFingerprint_Encoding builds the canonical bytes of a few requests by
// hand, following the grammar documented in fingerprint.go, and checks that
// their SHA-256 is the fingerprint.
func TestFingerprint_Encoding(t *testing.T) {
	cat := func(parts ...string) []byte { return []byte(strings.Join(parts, "")) }
	tests := []struct {
		method, route, contentType, body string
		canonical                        []byte
	}{
		{"POST", "/v1/refunds", jsonType, `{"amount":{"value":"12.50","currency":"EUR"},"items":[1,2.5,-3e2,true,null]}`,
			cat("\x04POST", "\x0b/v1/refunds", "J",
				"{",
				"\x85items", "[", "\xc11\x00", "\xc225\x01", "\xe13\x04", "t", "n", "]", // 1, 25e-1, -3e2
				"\x86amount", "{", "\x85value", "\x8512.50", "\x88currency", "\x83EUR", "}",
				"}")},
		{"PUT", "/v1/items/7", "text/plain; charset=utf-8", "hello, world",
			cat("\x03PUT", "\x0b/v1/items/7", "M\x0atext/plain", "B\x0chello, world")},
		{"DELETE", "/v1/items/7", jsonType, "",
			cat("\x06DELETE", "\x0b/v1/items/7", "J", "E")},
		{"GET", "/", "text/plain; charset", "",
			cat("\x03GET", "\x01/", "R\x13text/plain; charset", "E")},
		{"POST", "/", jsonType, `["\ud800", 0.0, -1e-2, 12345678901234567890123456789012345e5, "` + strings.Repeat("x", 32) + `"]`,
			cat("\x04POST", "\x01/", "J",
				"[", "\x83\xed\xa0\x80", "0", "\xe11\x03",
				"+\x23", "12345678901234567890123456789012345", "\x0a",
				"s\x20", strings.Repeat("x", 32), "]")},
	}
	for _, tt := range tests {
		sum := sha256.Sum256(tt.canonical)
		want := idem.FingerprintAlgorithm + ":" + fmt.Sprintf("%x", sum)
		got, err := idem.Fingerprinter{}.Sum(tt.method, tt.route, tt.contentType, []byte(tt.body))
		require.NoError(t, err)
		require.Equal(t, want, got, "%s %s %q", tt.method, tt.route, tt.body)
	}
}

func TestFingerprint_JSONEqual(t *testing.T) {
	long := strings.Repeat("a", 40)
	longer := strings.Repeat("xyz", 100) // a length needing a two-byte uvarint
	tests := []struct {
		name string
		a, b string
	}{
		{"member order", `{"a":1,"b":2}`, `{"b":2,"a":1}`},
		{"nested member order", `{"x":{"a":[{"p":1,"q":2}],"b":null},"y":true}`, `{"y":true,"x":{"b":null,"a":[{"q":2,"p":1}]}}`},
		{"whitespace", `{"a":[1,2],"b":"c"}`, " \t\r\n{ \"a\" :\n[ 1 ,\t2 ] ,\r\"b\"\t:\"c\" }\n "},
		{"escape letter", `"\u0041"`, `"A"`},
		{"escape solidus", `"\/"`, `"/"`},
		{"escape hex case", `"\u00e9"`, `"\u00E9"`},
		{"escape non-ASCII", `"\u00e9t\u00e9"`, `"été"`},
		{"escape pair", `"\ud83d\ude00"`, `"😀"`},
		{"escape pair upper", `"\uD83D\uDE00"`, `"😀"`},
		{"escape newline", `"\n"`, `"\u000a"`},
		{"escape quote", `"\""`, `"\u0022"`},
		{"escape backslash", `"\\"`, `"\u005c"`},
		{"escape short forms", `"\b\f\n\r\t"`, `"\u0008\u000c\u000a\u000d\u0009"`},
		{"escaped member name", `{"a":1,"b":2}`, `{"\u0062":2,"\u0061":1}`},
		{"long string escaped", `"` + long + `"`, `"` + long[:20] + `\u0061` + long[21:] + `"`},
		{"very long string escaped", `"` + longer + `"`, `"\u0078` + longer[1:] + `"`},
		{"long names", `{"address_line1":"x","address_line2":"y"}`, `{"address_line2":"y","address_line1":"x"}`},
		{"long name escaped", `{"` + long + `":1,"b":2}`, `{"b":2,"` + long[:3] + `\u0061` + long[4:] + `":1}`},
		{"one", `1`, `1.0`},
		{"one exponent", `1`, `1e0`},
		{"one scaled", `1`, `10e-1`},
		{"one fraction", `1`, `0.1e1`},
		{"one upper E", `1`, `0.1E+1`},
		{"one padded exponent", `1`, `100e-0002`},
		{"negative zero", `0`, `-0`},
		{"zero spellings", `0`, `-0.000e-5`},
		{"zero huge exponent", `0`, `0e99999999999999999999`},
		{"decimal", `1.5`, `15e-1`},
		{"decimal trailing zeros", `1.5`, `1.500`},
		{"thousands", `123000`, `1.23e5`},
		{"thousands exponent", `123000`, `123E3`},
		{"small", `0.000001`, `1e-6`},
		{"negative", `-2.50`, `-25e-1`},
		{"big integer", `12345678901234567890`, `1234567890123456789e1`},
		{"big integer fraction", `12345678901234567890`, `12345678901234567890.000`},
		{"beyond float64", `1e400`, `10e399`},
		{"beyond float64 small", `1e-400`, `0.1e-399`},
		{"large exponent", `1e999999999999999999`, `10e999999999999999998`},
		{"many members", manyMembers(false), manyMembers(true)},
		{"array of objects", `[{"b":1,"a":2},{"d":3,"c":4}]`, `[{"a":2,"b":1},{"c":4,"d":3}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, fp(t, tt.a), fp(t, tt.b), "%s vs %s", tt.a, tt.b)
		})
	}
}

// manyMembers returns an object with enough members to leave the
// small-object sort, in forward or reverse order.
func manyMembers(reverse bool) string {
	var parts []string
	for i := range 40 {
		k := i
		if reverse {
			k = 39 - i
		}
		parts = append(parts, fmt.Sprintf(`"member_%02d":%d`, k, k))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// distinctJSON lists JSON texts that all differ in meaning.
var distinctJSON = []string{
	`1`, `"1"`, `-1`, `2`, `10`, `0.1`, `0.10000000000000001`,
	`9007199254740992`, `9007199254740993`,
	`12345678901234567890`, `12345678901234567891`,
	`1e400`, `1e401`, `1e-400`, `-1e400`, `0`,
	`true`, `"true"`, `false`, `null`, `"null"`, `""`,
	`[]`, `{}`, `[[]]`, `[[],[]]`, `[[[]]]`, `[null]`, `[""]`, `[0]`,
	`[1,2]`, `[2,1]`, `[[1],2]`, `[1,[2]]`, `[1,2,3]`,
	`["a","b"]`, `["ab"]`, `["a,b"]`,
	`{"a":1}`, `{"A":1}`, `{"a":"1"}`, `{"a":[1]}`, `{"a":{}}`, `{"a":[]}`, `{"a":null}`,
	`{"":1}`, `{"a":""}`, `{"ab":"c"}`, `{"a":"bc"}`,
	`{"a":1,"b":2}`, `[{"a":1},{"b":2}]`, `[{"a":1,"b":2}]`,
	`"a"`, `"A"`, `"é"`, `"e\u0301"`,
	`"\ud800"`, `"\udc00"`, `"\ufffd"`, `"\ud800\ud800"`, `"\ud800x"`, `"x\ud800"`,
	`"\udc00\ud800"`, `"\ud800\udc00"`, `"\ud83d"`, `"\ude00"`,
	`"` + strings.Repeat("a", 40) + `"`, `"` + strings.Repeat("a", 39) + `b"`,
	`{"address_line1":1}`, `{"address_line2":1}`,
}

func TestFingerprint_JSONDistinct(t *testing.T) {
	seen := map[string]string{}
	for _, body := range distinctJSON {
		got := fp(t, body)
		if prev, ok := seen[got]; ok {
			t.Fatalf("%s and %s share fingerprint %s", prev, body, got)
		}
		seen[got] = body
	}
	// An empty body is no body, not any JSON value.
	empty := fp(t, "")
	_, ok := seen[empty]
	require.False(t, ok, "empty body collides with %s", seen[empty])
}

func TestFingerprint_Errors(t *testing.T) {
	tests := []struct {
		body string
		want error
	}{
		{`{"a":1,"a":2}`, idem.ErrDuplicateMember},
		{`{"a":1,"\u0061":2}`, idem.ErrDuplicateMember},
		{`{"a":1,"b":{"c":1,"c":1}}`, idem.ErrDuplicateMember},
		{`[{"x":1},{"x":1,"y":2,"x":3}]`, idem.ErrDuplicateMember},
		{`{"abcdefghij":1,"abcdefghij":2}`, idem.ErrDuplicateMember},
		{`{"` + strings.Repeat("k", 40) + `":1,"` + strings.Repeat("k", 40) + `":2}`, idem.ErrDuplicateMember},
		{strings.Replace(manyMembers(false), `"member_07"`, `"member_31"`, 1), idem.ErrDuplicateMember},
		{" ", idem.ErrInvalidJSON},
		{"\r\n", idem.ErrInvalidJSON},
		{`{`, idem.ErrInvalidJSON},
		{`}`, idem.ErrInvalidJSON},
		{`[`, idem.ErrInvalidJSON},
		{`[1,]`, idem.ErrInvalidJSON},
		{`[,1]`, idem.ErrInvalidJSON},
		{`[1 2]`, idem.ErrInvalidJSON},
		{`[1}`, idem.ErrInvalidJSON},
		{`{"a":1]`, idem.ErrInvalidJSON},
		{`{"a"}`, idem.ErrInvalidJSON},
		{`{"a":}`, idem.ErrInvalidJSON},
		{`{"a":1,}`, idem.ErrInvalidJSON},
		{`{"a" 1}`, idem.ErrInvalidJSON},
		{`{a:1}`, idem.ErrInvalidJSON},
		{`{1:1}`, idem.ErrInvalidJSON},
		{`'a'`, idem.ErrInvalidJSON},
		{`01`, idem.ErrInvalidJSON},
		{`-01`, idem.ErrInvalidJSON},
		{`+1`, idem.ErrInvalidJSON},
		{`.5`, idem.ErrInvalidJSON},
		{`1.`, idem.ErrInvalidJSON},
		{`1.e5`, idem.ErrInvalidJSON},
		{`1e`, idem.ErrInvalidJSON},
		{`1e+`, idem.ErrInvalidJSON},
		{`-`, idem.ErrInvalidJSON},
		{`--1`, idem.ErrInvalidJSON},
		{`0x10`, idem.ErrInvalidJSON},
		{`NaN`, idem.ErrInvalidJSON},
		{`Infinity`, idem.ErrInvalidJSON},
		{`-Infinity`, idem.ErrInvalidJSON},
		{`tru`, idem.ErrInvalidJSON},
		{`nul`, idem.ErrInvalidJSON},
		{`True`, idem.ErrInvalidJSON},
		{`truex`, idem.ErrInvalidJSON},
		{`1 2`, idem.ErrInvalidJSON},
		{`[1] x`, idem.ErrInvalidJSON},
		{`{}{}`, idem.ErrInvalidJSON},
		{"\xef\xbb\xbf{}", idem.ErrInvalidJSON},
		{"\v1", idem.ErrInvalidJSON},
		{"\f1", idem.ErrInvalidJSON},
		{"\u00a01", idem.ErrInvalidJSON},
		{"1\x00", idem.ErrInvalidJSON},
		{`"abc`, idem.ErrInvalidJSON},
		{`"abc\"`, idem.ErrInvalidJSON},
		{`"\`, idem.ErrInvalidJSON},
		{`"\x"`, idem.ErrInvalidJSON},
		{`"\U0041"`, idem.ErrInvalidJSON},
		{`"\u12"`, idem.ErrInvalidJSON},
		{`"\u12G4"`, idem.ErrInvalidJSON},
		{`"\ud800\u12"`, idem.ErrInvalidJSON},
		{"\"a\x01\"", idem.ErrInvalidJSON},
		{"\"a\nb\"", idem.ErrInvalidJSON},
		{"\"a\tb\"", idem.ErrInvalidJSON},
		{"\"\xff\"", idem.ErrInvalidJSON},
		{"\"\xc0\xaf\"", idem.ErrInvalidJSON},
		{"\"\xed\xa0\x80\"", idem.ErrInvalidJSON},
		{"\"" + strings.Repeat("a", 20) + "\xe2\x82\"", idem.ErrInvalidJSON},
		{`1e99999999999999999999`, idem.ErrInvalidJSON},
		{`-5e-99999999999999999999`, idem.ErrInvalidJSON},
		{`[1e1000000000000000000]`, idem.ErrInvalidJSON},
	}
	for _, tt := range tests {
		_, err := idem.Fingerprinter{}.Sum("POST", "/", jsonType, []byte(tt.body))
		require.ErrorIs(t, err, tt.want, "body %q", tt.body)
		require.Contains(t, err.Error(), "offset", "body %q", tt.body)
		for _, other := range []error{idem.ErrDuplicateMember, idem.ErrInvalidJSON, idem.ErrBodyTooDeep, idem.ErrBodyTooLarge} {
			if other != tt.want {
				require.NotErrorIs(t, err, other, "body %q", tt.body)
			}
		}
	}
}

func TestFingerprint_DuplicateMessage(t *testing.T) {
	_, err := idem.Fingerprinter{}.Sum("POST", "/", jsonType, []byte(`{"amount":1, "\u0061mount":2}`))
	require.ErrorIs(t, err, idem.ErrDuplicateMember)
	require.ErrorContains(t, err, `"amount" at offset 13`)
}

func TestFingerprinter_Sum_MaxBytes(t *testing.T) {
	f := idem.Fingerprinter{MaxBytes: 10}
	for _, ct := range []string{jsonType, "text/plain", "bad; header;"} {
		_, err := f.Sum("POST", "/", ct, []byte(`[1,2,3,45]`))
		require.NoError(t, err, ct)
		_, err = f.Sum("POST", "/", ct, []byte(`[1,2,3,456]`))
		require.ErrorIs(t, err, idem.ErrBodyTooLarge, ct)
	}
	// The bound is checked before parsing: invalid JSON over it is too large.
	_, err := f.Sum("POST", "/", jsonType, []byte(`{{{{{{{{{{{`))
	require.ErrorIs(t, err, idem.ErrBodyTooLarge)

	big := make([]byte, idem.DefaultMaxBodyBytes+1)
	for _, f := range []idem.Fingerprinter{{}, {MaxBytes: -1}} {
		_, err = f.Sum("POST", "/", "application/octet-stream", big)
		require.ErrorIs(t, err, idem.ErrBodyTooLarge)
		_, err = f.Sum("POST", "/", "application/octet-stream", big[:idem.DefaultMaxBodyBytes])
		require.NoError(t, err)
	}
	_, err = idem.Fingerprinter{}.Sum("POST", "/", "application/octet-stream", big)
	require.ErrorIs(t, err, idem.ErrBodyTooLarge)
}

func nested(depth int) string {
	return strings.Repeat("[", depth) + strings.Repeat("]", depth)
}

func nestedObjects(depth int) string {
	return strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)
}

func TestFingerprinter_Sum_MaxDepth(t *testing.T) {
	for _, tt := range []struct {
		f     idem.Fingerprinter
		bound int
	}{
		{idem.Fingerprinter{}, idem.DefaultMaxDepth},
		{idem.Fingerprinter{MaxDepth: -3}, idem.DefaultMaxDepth},
		{idem.Fingerprinter{MaxDepth: 1}, 1},
		{idem.Fingerprinter{MaxDepth: 3}, 3},
		{idem.Fingerprinter{MaxDepth: 200}, 200},
	} {
		for _, mk := range []func(int) string{nested, nestedObjects} {
			_, err := tt.f.Sum("POST", "/", jsonType, []byte(mk(tt.bound)))
			require.NoError(t, err, "depth %d", tt.bound)
			_, err = tt.f.Sum("POST", "/", jsonType, []byte(mk(tt.bound+1)))
			require.ErrorIs(t, err, idem.ErrBodyTooDeep, "depth %d", tt.bound+1)
		}
		_, err := tt.f.Sum("POST", "/", jsonType, []byte("1"))
		require.NoError(t, err, "scalars have depth 0")
	}
	mixed := `{"a":[{"b":[1]}]}` // depth 4
	_, err := idem.Fingerprinter{MaxDepth: 4}.Sum("POST", "/", jsonType, []byte(mixed))
	require.NoError(t, err)
	_, err = idem.Fingerprinter{MaxDepth: 3}.Sum("POST", "/", jsonType, []byte(mixed))
	require.ErrorIs(t, err, idem.ErrBodyTooDeep)
}

func TestFingerprinter_Sum_HugeDepth(t *testing.T) {
	body := []byte(nested(100000))
	_, err := idem.Fingerprinter{}.Sum("POST", "/", jsonType, body)
	require.ErrorIs(t, err, idem.ErrBodyTooDeep)
	_, err = idem.Fingerprinter{}.Sum("POST", "/", jsonType, body[:100000]) // unterminated, still too deep first
	require.ErrorIs(t, err, idem.ErrBodyTooDeep)

	// With a bound that allows it, the parser does not recurse, so deep
	// nesting costs heap rather than goroutine stack.
	f := idem.Fingerprinter{MaxDepth: 100000}
	_, err = f.Sum("POST", "/", jsonType, body)
	require.NoError(t, err)
	_, err = f.Sum("POST", "/", jsonType, []byte(nestedObjects(100000)))
	require.NoError(t, err)
}

func TestFingerprint_RequestFields(t *testing.T) {
	base := []string{"POST", "/v1/refunds", jsonType, `{"a":1}`}
	variants := [][]string{
		base,
		{"PUT", "/v1/refunds", jsonType, `{"a":1}`},
		{"post", "/v1/refunds", jsonType, `{"a":1}`}, // methods are case-sensitive
		{"POST", "/v1/refunds/", jsonType, `{"a":1}`},
		{"POST", "/V1/refunds", jsonType, `{"a":1}`},
		{"POST", "/v1/refunds", "text/plain", `{"a":1}`},
		{"POST", "/v1/refunds", jsonType, `{"a":2}`},
		// Field boundaries are length-prefixed, so shifting bytes between
		// fields changes the digest.
		{"POS", "T/v1/refunds", jsonType, `{"a":1}`},
		{"", "POST/v1/refunds", jsonType, `{"a":1}`},
		{"POST", "/v1/refunds", jsonType, ""},
		{"POST", "/v1/refunds", "", ""},
		{"POST", "/v1/refunds", "text/plain", ""},
	}
	seen := map[string][]string{}
	for _, v := range variants {
		got, err := idem.Fingerprinter{}.Sum(v[0], v[1], v[2], []byte(v[3]))
		require.NoError(t, err)
		prev, ok := seen[got]
		require.False(t, ok, "%q and %q collide", prev, v)
		seen[got] = v
	}
}

func TestFingerprint_ContentTypes(t *testing.T) {
	body := []byte(`{"b": [1, 2.0], "a": "x"}`)
	same := []byte(`{"a":"x","b":[1e0,2]}`)
	want, err := idem.Fingerprinter{}.Sum("POST", "/", jsonType, body)
	require.NoError(t, err)

	// Every JSON type is one class, whatever its parameters or case.
	for _, ct := range []string{
		jsonType, "application/json; charset=utf-8", "application/json;charset=UTF-8",
		"APPLICATION/JSON", "Application/Json; Charset=\"utf-8\"", " application/json ",
		"text/json", "application/problem+json", "application/vnd.api+json; charset=utf-8",
		"application/merge-patch+JSON",
	} {
		for _, b := range [][]byte{body, same} {
			got, err := idem.Fingerprinter{}.Sum("POST", "/", ct, b)
			require.NoError(t, err, ct)
			require.Equal(t, want, got, ct)
		}
	}

	// Other types hash the bytes: whitespace and order matter, and any bytes go.
	for _, ct := range []string{
		"text/plain", "application/octet-stream", "application/jsonx", "application/x-json-stream",
		"json", "application/json; charset", "application/json;;", "", "???",
	} {
		a, err := idem.Fingerprinter{}.Sum("POST", "/", ct, body)
		require.NoError(t, err, ct)
		b, err := idem.Fingerprinter{}.Sum("POST", "/", ct, same)
		require.NoError(t, err, ct)
		require.NotEqual(t, a, b, ct)
		require.NotEqual(t, want, a, ct)
		_, err = idem.Fingerprinter{}.Sum("POST", "/", ct, []byte("\xff\xfe{not json"))
		require.NoError(t, err, ct)
	}
}

// TestFingerprint_MediaTypeParsing checks that content types that parse
// fingerprint as their parsed media type, whichever internal path handles
// them, and that types that do not parse are kept apart from those that do.
func TestFingerprint_MediaTypeParsing(t *testing.T) {
	body := []byte("a  b")
	sum := func(ct string) string {
		got, err := idem.Fingerprinter{}.Sum("PUT", "/doc", ct, body)
		require.NoError(t, err, ct)
		return got
	}
	parsed := map[string]bool{}
	for _, ct := range []string{
		"text/plain", "Text/Plain", "TEXT/PLAIN", "text/plain; charset=utf-8", "text/plain;charset=utf-8",
		"text/plain; charset=UTF-8", "text/plain;charset=UTF-8", "text/plain ; charset=utf-8",
		"text/plain;", "text/plain; charset=utf-8; format=flowed", "text/plain; charset=UTF8",
		"text/plain\t", "text/html", "image/svg+xml", "multipart/form-data",
		"application/x-www-form-urlencoded", "a/b", "x-custom/Y.Z-1",
	} {
		mt, _, err := mime.ParseMediaType(ct)
		require.NoError(t, err, ct)
		require.Equal(t, sum(mt), sum(ct), ct)
		parsed[mt] = true
	}
	require.NotEqual(t, sum("text/plain"), sum("text/html"))

	seen := map[string]string{}
	for mt := range parsed {
		seen[sum(mt)] = mt
	}
	for _, ct := range []string{
		"text/plain; charset", "text/plain; charset=", "text/plain/x", "text/", "/plain",
		"text/pla in", "text/plain; a=1; a=2", "tëxt/plain", "", " ",
	} {
		_, _, err := mime.ParseMediaType(ct)
		require.Error(t, err, ct)
		got := sum(ct)
		prev, ok := seen[got]
		require.False(t, ok, "%q collides with %q", ct, prev)
		seen[got] = ct
	}
}

func TestFingerprint_EmptyBody(t *testing.T) {
	seen := map[string]string{}
	for _, ct := range []string{jsonType, "text/plain", "", "application/json; charset"} {
		got, err := idem.Fingerprinter{}.Sum("DELETE", "/v1/items/1", ct, nil)
		require.NoError(t, err, ct)
		again, err := idem.Fingerprinter{}.Sum("DELETE", "/v1/items/1", ct, []byte{})
		require.NoError(t, err, ct)
		require.Equal(t, got, again, "nil and empty bodies are the same")
		_, ok := seen[got]
		require.False(t, ok, ct)
		seen[got] = ct
	}
	for _, body := range []string{`null`, `""`, `{}`, `[]`, `0`} {
		got := fp(t, body)
		empty, err := idem.Fingerprinter{}.Sum("POST", "/v1/refunds", jsonType, nil)
		require.NoError(t, err)
		require.NotEqual(t, empty, got, body)
	}
}

func TestFingerprint_Concurrent(t *testing.T) {
	bodies := append([]string{refundBody}, distinctJSON...)
	want := make([]string, len(bodies))
	for i, b := range bodies {
		want[i] = fp(t, b)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for n := range 200 {
				i := (g + n) % len(bodies)
				got, err := idem.Fingerprinter{}.Sum("POST", "/v1/refunds", jsonType, []byte(bodies[i]))
				if err != nil || got != want[i] {
					t.Errorf("body %q: got %s, %v; want %s", bodies[i], got, err, want[i])
					return
				}
				// Interleave failures, which leave pooled state mid-parse.
				if _, err := (idem.Fingerprinter{}).Sum("POST", "/", jsonType, []byte(`{"a":[1,{"b":`)); err == nil {
					t.Error("truncated body accepted")
					return
				}
			}
		})
	}
	wg.Wait()
}

// A JSON value for the property test. Numbers are held canonically as
// sign, significant digits without leading or trailing zeros, and the
// exponent of the last digit; zero has no digits.
type jsonValue struct {
	kind    byte // 'n' null, 'b' bool, 'd' number, 's' string, 'a' array, 'o' object
	boolean bool
	neg     bool
	digits  string
	exp     int
	str     string
	elems   []jsonValue
	names   []string
}

func randomValue(r *rand.Rand, depth int) jsonValue {
	kinds := "nbdsao"
	if depth >= 4 {
		kinds = "nbds"
	}
	switch kinds[r.IntN(len(kinds))] {
	case 'n':
		return jsonValue{kind: 'n'}
	case 'b':
		return jsonValue{kind: 'b', boolean: r.IntN(2) == 0}
	case 'd':
		return randomNumber(r)
	case 's':
		return jsonValue{kind: 's', str: randomString(r)}
	case 'a':
		v := jsonValue{kind: 'a'}
		for range r.IntN(5) {
			v.elems = append(v.elems, randomValue(r, depth+1))
		}
		return v
	default:
		v := jsonValue{kind: 'o'}
		used := map[string]bool{}
		for range r.IntN(7) {
			name := randomString(r)
			if used[name] {
				continue
			}
			used[name] = true
			v.names = append(v.names, name)
			v.elems = append(v.elems, randomValue(r, depth+1))
		}
		return v
	}
}

func randomNumber(r *rand.Rand) jsonValue {
	if r.IntN(8) == 0 {
		return jsonValue{kind: 'd', neg: r.IntN(2) == 0}
	}
	n := 1 + r.IntN(6)
	if r.IntN(4) == 0 {
		n = 15 + r.IntN(30) // beyond float64 precision
	}
	d := []byte{byte('1' + r.IntN(9))}
	for len(d) < n-1 {
		d = append(d, byte('0'+r.IntN(10)))
	}
	if n > 1 {
		d = append(d, byte('1'+r.IntN(9)))
	}
	exp := r.IntN(21) - 10
	if r.IntN(10) == 0 {
		exp = r.IntN(2000) - 1000 // beyond float64 range
	}
	return jsonValue{kind: 'd', neg: r.IntN(3) == 0, digits: string(d), exp: exp}
}

var stringAlphabet = []rune("abcxyzABC019 _-./\\\"'\u0000\u001f\u007f\n\té€日本😀\U0010FFFF\u2028\uFFFD")

func randomString(r *rand.Rand) string {
	var s []rune
	n := r.IntN(6)
	if r.IntN(8) == 0 {
		n = 30 + r.IntN(120) // past the one-byte length tag
	}
	for range n {
		s = append(s, stringAlphabet[r.IntN(len(stringAlphabet))])
	}
	return string(s)
}

// writeJSON writes v with random member order, whitespace, escapes and
// number spellings; the meaning never changes.
func writeJSON(r *rand.Rand, sb *strings.Builder, v jsonValue) {
	space := func() {
		for range r.IntN(3) / 2 * (1 + r.IntN(2)) {
			sb.WriteByte(" \t\r\n"[r.IntN(4)])
		}
	}
	space()
	switch v.kind {
	case 'n':
		sb.WriteString("null")
	case 'b':
		sb.WriteString(strconv.FormatBool(v.boolean))
	case 'd':
		sb.WriteString(spellNumber(r, v))
	case 's':
		writeString(r, sb, v.str)
	case 'a':
		sb.WriteByte('[')
		for i, e := range v.elems {
			if i > 0 {
				sb.WriteByte(',')
			}
			writeJSON(r, sb, e)
		}
		space()
		sb.WriteByte(']')
	case 'o':
		sb.WriteByte('{')
		for i, k := range r.Perm(len(v.names)) {
			if i > 0 {
				sb.WriteByte(',')
			}
			space()
			writeString(r, sb, v.names[k])
			space()
			sb.WriteByte(':')
			writeJSON(r, sb, v.elems[k])
		}
		space()
		sb.WriteByte('}')
	}
	space()
}

func writeString(r *rand.Rand, sb *strings.Builder, s string) {
	sb.WriteByte('"')
	for _, c := range s {
		escape := c < 0x20 || c == '"' || c == '\\' || r.IntN(4) == 0
		switch {
		case !escape:
			sb.WriteRune(c)
		case c == '/' && r.IntN(2) == 0:
			sb.WriteString(`\/`)
		case c == '\n' && r.IntN(2) == 0:
			sb.WriteString(`\n`)
		case c == '"' && r.IntN(2) == 0:
			sb.WriteString(`\"`)
		case c == '\\' && r.IntN(2) == 0:
			sb.WriteString(`\\`)
		case c > 0xFFFF:
			hi, lo := utf16.EncodeRune(c)
			writeEscape(r, sb, hi)
			writeEscape(r, sb, lo)
		default:
			writeEscape(r, sb, c)
		}
	}
	sb.WriteByte('"')
}

func writeEscape(r *rand.Rand, sb *strings.Builder, c rune) {
	hex := fmt.Sprintf("%04x", c)
	if r.IntN(2) == 0 {
		hex = strings.ToUpper(hex)
	}
	sb.WriteString(`\u` + hex)
}

// spellNumber writes v in one of its many spellings: value = D × 10^exp is
// written as a mantissa with the decimal point anywhere and a matching
// exponent, with extra zeros on either side.
func spellNumber(r *rand.Rand, v jsonValue) string {
	var sb strings.Builder
	if v.neg {
		sb.WriteByte('-')
	}
	if v.digits == "" {
		sb.WriteString([]string{"0", "0.0", "0e7", "0.000E-3", "0E+0"}[r.IntN(5)])
		return sb.String()
	}
	d := v.digits + strings.Repeat("0", r.IntN(3)) // trailing zeros...
	e := v.exp - (len(d) - len(v.digits))          // ...compensated
	written := 0                                   // the exponent to print
	if r.IntN(3) > 0 {
		written = r.IntN(13) - 6
	}
	q := e - written // mantissa = d × 10^q
	switch {
	case q >= 0:
		sb.WriteString(d + strings.Repeat("0", q))
		if r.IntN(3) == 0 {
			sb.WriteString(".0")
		}
	case len(d) > -q:
		sb.WriteString(d[:len(d)+q] + "." + d[len(d)+q:])
	default:
		sb.WriteString("0." + strings.Repeat("0", -q-len(d)) + d)
	}
	if written != 0 || r.IntN(4) == 0 {
		sb.WriteString([]string{"e", "E"}[r.IntN(2)])
		switch {
		case written < 0:
			sb.WriteByte('-')
		case r.IntN(2) == 0:
			sb.WriteByte('+')
		}
		sb.WriteString(strings.Repeat("0", r.IntN(2)) + strconv.Itoa(abs(written)))
	}
	return sb.String()
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// leaves returns pointers to the scalar values and member names in v.
func leaves(v *jsonValue, out []*jsonValue) []*jsonValue {
	if v.kind != 'a' && v.kind != 'o' {
		return append(out, v)
	}
	for i := range v.elems {
		out = leaves(&v.elems[i], out)
	}
	return out
}

func (v jsonValue) clone() jsonValue {
	c := v
	c.names = append([]string(nil), v.names...)
	c.elems = nil
	for _, e := range v.elems {
		c.elems = append(c.elems, e.clone())
	}
	return c
}

// mutate changes one scalar of v, or one member name, so that its meaning
// differs, and says what it did.
func mutate(r *rand.Rand, v *jsonValue) string {
	var objects []*jsonValue
	var walk func(*jsonValue)
	walk = func(x *jsonValue) {
		if x.kind == 'o' && len(x.names) > 0 {
			objects = append(objects, x)
		}
		for i := range x.elems {
			walk(&x.elems[i])
		}
	}
	walk(v)
	if len(objects) > 0 && r.IntN(4) == 0 {
		o := objects[r.IntN(len(objects))]
		k := r.IntN(len(o.names))
		taken := map[string]bool{}
		for _, n := range o.names {
			taken[n] = true
		}
		name := o.names[k] + "x"
		for taken[name] {
			name += "x"
		}
		o.names[k] = name
		return "renamed member"
	}
	ls := leaves(v, nil)
	if len(ls) == 0 { // only empty containers: grow the outermost one
		v.elems = append(v.elems, jsonValue{kind: 'n'})
		if v.kind == 'o' {
			v.names = append(v.names, "added")
		}
		return "added a member or element"
	}
	l := ls[r.IntN(len(ls))]
	switch l.kind {
	case 'n':
		*l = jsonValue{kind: []byte("bds")[r.IntN(3)]}
		return "replaced null"
	case 'b':
		if r.IntN(2) == 0 {
			l.boolean = !l.boolean
			return "flipped bool"
		}
		*l = jsonValue{kind: 's', str: strconv.FormatBool(l.boolean)}
		return "bool to string"
	case 'd':
		switch {
		case l.digits == "":
			l.digits, l.exp = "1", r.IntN(5)-2
			return "zero to non-zero"
		case r.IntN(4) == 0:
			*l = jsonValue{kind: 's', str: l.digits}
			return "number to string"
		case r.IntN(3) == 0:
			l.exp++
			return "changed exponent"
		case r.IntN(2) == 0:
			l.neg = !l.neg
			return "flipped sign"
		default:
			d := []byte(l.digits)
			i := r.IntN(len(d))
			old := d[i]
			for d[i] == old || (i == 0 || i == len(d)-1) && d[i] == '0' {
				d[i] = byte('0' + r.IntN(10))
			}
			l.digits = string(d)
			return "changed a digit"
		}
	default: // 's'
		s := []rune(l.str)
		if len(s) == 0 || r.IntN(3) == 0 {
			l.str += string(stringAlphabet[r.IntN(len(stringAlphabet))])
			return "appended a char"
		}
		i := r.IntN(len(s))
		old := s[i]
		for s[i] == old {
			s[i] = stringAlphabet[r.IntN(len(stringAlphabet))]
		}
		l.str = string(s)
		return "changed a char"
	}
}

func TestFingerprint_Property(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 5000
	if testing.Short() {
		n = 500
	}
	for i := range n {
		v := randomValue(r, 0)
		var a, b strings.Builder
		writeJSON(r, &a, v)
		writeJSON(r, &b, v)
		fa, fb := fp(t, a.String()), fp(t, b.String())
		require.Equal(t, fa, fb, "case %d: same value, different spellings:\n%s\n%s", i, a.String(), b.String())

		m := v.clone()
		what := mutate(r, &m)
		var c strings.Builder
		writeJSON(r, &c, m)
		require.NotEqual(t, fa, fp(t, c.String()), "case %d: %s did not change the digest:\n%s\n%s", i, what, a.String(), c.String())
	}
}

// TestFingerprint_Allocs checks that a warm Fingerprint allocates its result
// and nothing else, whatever the body: scratch space comes from a pool.
func TestFingerprint_Allocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	for _, tt := range []struct{ contentType, body string }{
		{jsonType, refundBody},
		{jsonType, benchBodies[1].body},
		{jsonType, manyMembers(true)},
		{jsonType, `{"b":[1e5,-0.25,"x\ty",null],"a":{"` + strings.Repeat("k", 40) + `":true}}`},
		{"application/problem+json", `[]`},
		{"text/plain; charset=utf-8", "hello, world"},
		{jsonType, ""},
	} {
		body := []byte(tt.body)
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := (idem.Fingerprinter{}).Sum("POST", "/v1/refunds", tt.contentType, body); err != nil {
				t.Fatal(err)
			}
		})
		require.Equal(t, 1.0, allocs, "%s %q", tt.contentType, tt.body)
	}
}

// TestFingerprint_LoneSurrogates checks every lone surrogate code unit
// against U+FFFD and against each other in a sample.
func TestFingerprint_LoneSurrogates(t *testing.T) {
	replacement := fp(t, `"\ufffd"`)
	seen := map[string]rune{}
	for c := rune(0xD800); c < 0xE000; c += 0x3F {
		got := fp(t, fmt.Sprintf(`"\u%04x"`, c))
		require.NotEqual(t, replacement, got, "%U", c)
		prev, ok := seen[got]
		require.False(t, ok, "%U collides with %U", c, prev)
		seen[got] = c
		require.False(t, utf8.ValidRune(c))
	}
}

func ExampleFingerprinter_Sum() {
	a, _ := idem.Fingerprinter{}.Sum("POST", "/v1/refunds", "application/json",
		[]byte(`{"amount": 10.50, "currency": "EUR"}`))
	b, _ := idem.Fingerprinter{}.Sum("POST", "/v1/refunds", "application/json; charset=utf-8",
		[]byte(`{"currency":"\u0045UR","amount":1.05e1}`))
	c, _ := idem.Fingerprinter{}.Sum("POST", "/v1/refunds", "application/json",
		[]byte(`{"amount": 10.51, "currency": "EUR"}`))
	fmt.Println(strings.HasPrefix(a, idem.FingerprintAlgorithm+":"))
	fmt.Println(a == b, a == c)

	_, err := idem.Fingerprinter{}.Sum("POST", "/v1/refunds", "application/json",
		[]byte(`{"amount": 1, "amount": 2}`))
	fmt.Println(errors.Is(err, idem.ErrDuplicateMember))
	// Output:
	// true
	// true false
	// true
}

func ExampleFingerprinter_Sum_bounds() {
	f := idem.Fingerprinter{MaxBytes: 64, MaxDepth: 2}
	_, err := f.Sum("POST", "/v1/batch", "application/json", []byte(`[[1, 2], [3]]`))
	fmt.Println(err)
	_, err = f.Sum("POST", "/v1/batch", "application/json", []byte(`[[[1]]]`))
	fmt.Println(errors.Is(err, idem.ErrBodyTooDeep))
	_, err = f.Sum("POST", "/v1/upload", "application/octet-stream", make([]byte, 65))
	fmt.Println(errors.Is(err, idem.ErrBodyTooLarge))
	// Output:
	// <nil>
	// true
	// true
}

// refundBody is a realistic tool-call body of about 300 bytes.
const refundBody = `{"tool":"payments.refund","arguments":{"payment_id":"pay_3NqKx8Lz2vR9",` +
	`"amount":{"value":"129.95","currency":"EUR"},"reason":"duplicate_charge",` +
	`"items":[{"sku":"SKU-10023","qty":2,"price":49.99},{"sku":"SKU-20411","qty":1,"price":29.97}],` +
	`"notify":true,"metadata":{"ticket":"CS-88412"}},"dry_run":false}`

// benchBodies are the bodies of BenchmarkFingerprint and BenchmarkSHA256:
// refundBody, and the body of the fingerprint workload in bench/. SHA-256
// works in 64-byte blocks, so the ratio moves with where each length falls.
var benchBodies = []struct{ name, body string }{
	{"refund", refundBody},
	{"order", `{"order_id":"ord_8f14e45fceea167a","amount":{"value":"42.00","currency":"EUR"},` +
		`"reason":"requested_by_customer","items":[{"sku":"SKU-1042","qty":2,"unit_price":"12.50"},` +
		`{"sku":"SKU-7730","qty":1,"unit_price":"17.00"}],"metadata":{"agent_run":"run_5c2a9e","step":7,` +
		`"tool":"refund","note":"customer \u00e9mail confirmed"},"notify":true,"idempotent":null}`},
}

// BenchmarkFingerprint and BenchmarkSHA256 hash the same bytes, so one run
// gives the cost of canonicalization relative to hashing alone.
func BenchmarkFingerprint(b *testing.B) {
	for _, bb := range benchBodies {
		body := []byte(bb.body)
		b.Run(fmt.Sprintf("%s-%dB", bb.name, len(body)), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := (idem.Fingerprinter{}).Sum("POST", "/v1/tools/call", "application/json", body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSHA256(b *testing.B) {
	for _, bb := range benchBodies {
		body := []byte(bb.body)
		b.Run(fmt.Sprintf("%s-%dB", bb.name, len(body)), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				sha256.Sum256(body)
			}
		})
	}
}
