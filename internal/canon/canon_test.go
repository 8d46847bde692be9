package canon

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// encode returns the canonical encoding of a JSON body for a fixed method
// and route.
func encode(t testing.TB, body string) ([]byte, error) {
	t.Helper()
	var e Encoder
	head, tail, err := e.Request("POST", "/r", "application/json", []byte(body), 64)
	require.Nil(t, tail)
	return bytes.Clone(head), err
}

// prefix is the encoding of POST, /r and the JSON class.
var prefix = []byte{4, 'P', 'O', 'S', 'T', 2, '/', 'r', 'J'}

func TestEncoder_Request_Grammar(t *testing.T) {
	for _, tt := range []struct {
		body string
		want []byte
	}{
		{`null`, []byte{'n'}},
		{` [true , false] `, []byte{'[', 't', 'f', ']'}},
		{`"ab"`, []byte{0x82, 'a', 'b'}},
		{`"\u00e9\n"`, []byte{0x83, 0xC3, 0xA9, '\n'}},
		{`"\ud800"`, []byte{0x83, 0xED, 0xA0, 0x80}},
		{`"` + strings.Repeat("x", 32) + `"`, append([]byte{'s', 32}, strings.Repeat("x", 32)...)},
		{`-0.0`, []byte{'0'}},
		{`12.50`, []byte{0xC3, '1', '2', '5', 1}}, // 125 × 10^-1, zigzag(-1) = 1
		{`-1.25e3`, []byte{0xE3, '1', '2', '5', 2}},
		{`1200`, []byte{0xC2, '1', '2', 4}},
		{`{"b":1,"a":{}}`, []byte{'{', 0x81, 'a', '{', '}', 0x81, 'b', 0xC1, '1', 0, '}'}},
		{`[]`, []byte{'[', ']'}},
	} {
		got, err := encode(t, tt.body)
		require.NoError(t, err, tt.body)
		require.Equal(t, append(bytes.Clone(prefix), tt.want...), got, tt.body)
	}
}

func TestEncoder_Request_SameMeaning(t *testing.T) {
	for _, pair := range [][2]string{
		{`{"a":1,"b":2}`, `{ "b" : 2 , "a" : 1 }`},
		{`"A/"`, `"\u0041\/"`},
		{`"😀"`, `"\ud83d\ude00"`},
		{`1.5`, `15e-1`},
		{`100`, `1e2`},
		{`0`, `-0e99999999999999999999`},
		{`{"k":[1,{"y":1,"x":2}]}`, "{\n\t\"k\": [1, {\"x\": 2, \"y\": 1}]\n}"},
	} {
		a, err := encode(t, pair[0])
		require.NoError(t, err)
		b, err := encode(t, pair[1])
		require.NoError(t, err)
		require.Equal(t, a, b, "%s vs %s", pair[0], pair[1])
	}
}

func TestEncoder_Request_Errors(t *testing.T) {
	for _, tt := range []struct {
		body   string
		kind   Kind
		detail string
	}{
		{`{"a":1,"a":2}`, Duplicate, `"a" at offset 7`},
		{`{"a":1,"\u0061":2}`, Duplicate, `"a" at offset 7`},
		{`[[1]]`, TooDeep, `more than 1 levels at offset 1`},
		{`[1,]`, Invalid, `unexpected ']' at offset 3`},
		{`{"a" 1}`, Invalid, `expected ':' at offset 5`},
		{`1e1000000000000000000`, Invalid, `exponent out of range at offset 0`},
		{`"a` + "\x01" + `"`, Invalid, `unescaped control character at offset 2`},
		{`true false`, Invalid, `data after the value at offset 5`},
		{`{"a":tru}`, Invalid, `bad literal at offset 5`},
	} {
		var e Encoder
		_, _, err := e.Request("POST", "/r", "application/json", []byte(tt.body), map[bool]int{true: 1, false: 64}[tt.kind == TooDeep])
		var ce *Error
		require.True(t, errors.As(err, &ce), "%s: %v", tt.body, err)
		require.Equal(t, tt.kind, ce.Kind, tt.body)
		require.Equal(t, tt.detail, ce.Detail, tt.body)
	}
}

func TestEncoder_Request_Bodies(t *testing.T) {
	var e Encoder
	body := []byte("opaque\x00bytes")
	head, tail, err := e.Request("PUT", "/x", "Application/Octet-Stream; q=1", body, 64)
	require.NoError(t, err)
	require.Equal(t, body, tail, "a body compared byte for byte is not copied")
	want := []byte{3, 'P', 'U', 'T', 2, '/', 'x', 'M', 24}
	want = append(want, "application/octet-stream"...)
	want = append(want, 'B', byte(len(body)))
	require.Equal(t, want, head)

	head, tail, err = e.Request("GET", "/", "application/problem+json", nil, 64)
	require.NoError(t, err)
	require.Nil(t, tail)
	require.Equal(t, []byte{3, 'G', 'E', 'T', 1, '/', 'J', 'E'}, head)

	head, _, err = e.Request("GET", "/", "a b", []byte("x"), 64)
	require.NoError(t, err)
	require.Equal(t, []byte{3, 'G', 'E', 'T', 1, '/', 'R', 3, 'a', ' ', 'b', 'B', 1}, head)
}

// TestEncoder_Trim checks that a large body's scratch space is not kept.
func TestEncoder_Trim(t *testing.T) {
	var e Encoder
	big := `[` + strings.Repeat(`{"b":1,"a":2},`, 10000) + `0]`
	_, _, err := e.Request("POST", "/", "application/json", []byte(big), 64)
	require.NoError(t, err)
	require.Greater(t, cap(e.buf), maxPooledBuf)
	e.Trim()
	require.Nil(t, e.buf)
	_, _, err = e.Request("POST", "/", "application/json", []byte(`{"a":1}`), 64)
	require.NoError(t, err)
}

// slowJSON is appendJSON without scan: every token taken by step. scan
// must never change the result.
func (e *Encoder) slowJSON(b, body []byte, maxDepth int) ([]byte, error) {
	e.reset(maxDepth)
	i := skipSpace(body, 0)
	at := atValue
	for {
		if cap(b)-len(b) < fastRoom {
			b = append(b, make([]byte, fastRoom)...)[:len(b)]
		}
		var err error
		if b, i, at, err = e.step(b, body, i, at); err != nil || at == atEnd {
			return b, err
		}
	}
}

// checkScan checks that scan and step agree on body, bytes and errors.
func checkScan(t *testing.T, body []byte, maxDepth int) {
	t.Helper()
	var fast, slow Encoder
	got, err := fast.appendJSON(nil, body, maxDepth)
	want, werr := slow.slowJSON(nil, body, maxDepth)
	if fmt.Sprint(err) != fmt.Sprint(werr) || (err == nil && !bytes.Equal(got, want)) {
		t.Fatalf("%q (depth %d):\nscan %x, %v\nstep %x, %v", body, maxDepth, got, err, want, werr)
	}
}

func TestScan_AgreesWithStep(t *testing.T) {
	for _, body := range scanSeeds {
		checkScan(t, []byte(body), 64)
		checkScan(t, []byte(body), 2)
	}
}

var scanSeeds = []string{
	`{"tool":"payments.refund","arguments":{"payment_id":"pay_3NqKx8Lz2vR9","amount":{"value":"129.95",` +
		`"currency":"EUR"},"reason":"duplicate_charge","items":[{"sku":"SKU-10023","qty":2,"price":49.99},` +
		`{"sku":"SKU-20411","qty":1,"price":29.97}],"notify":true,"metadata":{"ticket":"CS-88412"}},"dry_run":false}`,
	`{"z":0,"y":-0,"x":-12.5,"w":1e3,"v":0.10,"u":12345678901234567,"t":[],"s":{},"r":[[[]]],"q":"\u00e9"}`,
	`{"` + strings.Repeat("k", 20) + `":1,"` + strings.Repeat("k", 19) + `":2,"` + strings.Repeat("k", 31) + `":3}`,
	`{"a":1,"b":2,"a":3}`, `{"b":{"c":1,"c":2}}`, `[1,2,]`, `{"a" : 1 , "b" :2}`, `{"a"1}`,
	`[true,false,null,tru,fals]`, `"` + strings.Repeat("x", 30) + `"`, `"` + strings.Repeat("x", 31) + `"`,
	`[[[1]]]`, `{"a":[{"b":[{"c":1}]}]}`, `-`, `01`, `1.`, `1e`, `[1.5e+2, 2E-2, -0.0e0]`,
}

// FuzzScan checks that the fast path of the encoder (scan) produces what
// the general one (step) does, byte for byte and error for error.
func FuzzScan(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkScan(t, body, 64)
		checkScan(t, body, 3)
	})
}

func BenchmarkEncoder_Request(b *testing.B) {
	body := []byte(scanSeeds[0])
	var e Encoder
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, _, err := e.Request("POST", "/v1/tools/call", "application/json", body, 64); err != nil {
			b.Fatal(err)
		}
	}
}
