package codec

import (
	"github.com/vmihailenco/msgpack/v5"
)

// A record that the fast decoder does not take is left to msgpack, which
// decodes it by reflection. msgpack is not safe with corrupt bytes: a
// corrupt length can have it allocate hundreds of gigabytes, or grow its
// pooled buffer for good, and deep nesting can exhaust its stack (see
// docs/record-format.md). So checkMsgpack first follows the decoding
// through the bytes, reading codes and lengths where msgpack would, and
// refuses a record that msgpack would fail on or nests too deep; msgpack
// then runs only on records it reads whole.

// msgpackMaxDepth bounds the nesting of the unknown fields in a record left
// to msgpack. A record nests 4 levels deep.
const msgpackMaxDepth = 10000

// decodeMsgpack decodes b with msgpack, if checkMsgpack lets it.
func decodeMsgpack(b []byte) (*Record, error) {
	if !checkMsgpack(b) {
		return nil, &CorruptError{Reason: "undecodable record (truncated, unexpected type or nested too deep)"}
	}
	r := new(Record)
	if err := msgpack.Unmarshal(b, r); err != nil {
		return nil, &CorruptError{Reason: err.Error()}
	}
	return r, nil
}

// decodeResultMsgpack decodes a result alone with msgpack, if the walk
// that checkMsgpack makes of a record lets it.
func decodeResultMsgpack(b []byte) (*Result, error) {
	w := msgpackWalker{b: b}
	if !w.structure(resultLayout()) {
		return nil, &CorruptError{Reason: "undecodable result (truncated, unexpected type or nested too deep)"}
	}
	r := new(Result)
	if err := msgpack.Unmarshal(b, r); err != nil {
		return nil, &CorruptError{Reason: err.Error()}
	}
	return r, nil
}

// checkMsgpack reports whether msgpack.Unmarshal reads a Record from b
// without failing on a type code or the end of the input, and nests at most
// msgpackMaxDepth deep.
func checkMsgpack(b []byte) bool {
	w := msgpackWalker{b: b}
	return w.structure(recordLayout())
}

// mpKind is how msgpack decodes a field, by its Go type.
type mpKind uint8

const (
	mpKindInt      mpKind = iota // any integer type, time.Duration, State
	mpKindString                 // string
	mpKindBool                   // bool
	mpKindTime                   // time.Time, the timestamp extension
	mpKindBytes                  // []byte
	mpKindResult                 // *Result
	mpKindAttempts               // []Attempt
	mpKindHeader                 // map[string][]string
)

// mpField is a struct field as msgpack decodes it: its tag name and kind.
type mpField struct {
	name string
	kind mpKind
}

// recordLayout, resultLayout and attemptLayout are the fields of Record,
// Result and Attempt in struct order (the order of a struct written as an
// array). A test checks them against the struct tags.
func recordLayout() []mpField {
	return []mpField{{"v", mpKindInt}, {"sc", mpKindString}, {"k", mpKindString}, {"st", mpKindInt},
		{"fp", mpKindString}, {"tk", mpKindInt}, {"le", mpKindTime}, {"ex", mpKindTime}, {"rt", mpKindInt},
		{"r", mpKindResult}, {"fs", mpKindTime}, {"ca", mpKindTime}, {"da", mpKindTime}, {"cl", mpKindInt},
		{"ck", mpKindInt}, {"nc", mpKindTime}, {"at", mpKindBool}, {"tw", mpKindBool}, {"rc", mpKindString}, {"ow", mpKindString},
		{"a", mpKindAttempts}, {"rp", mpKindInt}, {"lr", mpKindTime}, {"cf", mpKindInt}, {"mm", mpKindInt},
		{"lj", mpKindTime}}
}

func resultLayout() []mpField {
	return []mpField{{"s", mpKindInt}, {"h", mpKindHeader}, {"b", mpKindBytes}, {"e", mpKindString},
		{"t", mpKindBool}}
}

func attemptLayout() []mpField {
	return []mpField{{"t", mpKindInt}, {"c", mpKindTime}, {"o", mpKindString}, {"e", mpKindTime},
		{"x", mpKindString}, {"r", mpKindString}, {"s", mpKindInt}}
}

// msgpackWalker reads b as msgpack v5 decodes a Record from it (see
// decode.go, decode_map.go, decode_slice.go, decode_string.go,
// decode_number.go and ext.go in github.com/vmihailenco/msgpack/v5),
// reading only codes and lengths. Each method reads one value and reports
// whether msgpack reads it and goes on; false means msgpack fails there.
type msgpackWalker struct {
	b   []byte
	pos int
}

// code reads a type code.
func (w *msgpackWalker) code() (byte, bool) {
	if w.pos >= len(w.b) {
		return 0, false
	}
	w.pos++
	return w.b[w.pos-1], true
}

// skip reads n bytes.
func (w *msgpackWalker) skip(n uint64) bool {
	if n > uint64(len(w.b)-w.pos) {
		return false
	}
	w.pos += int(n)
	return true
}

// uint reads a big-endian length of size bytes.
func (w *msgpackWalker) uint(size int) (uint64, bool) {
	if size > len(w.b)-w.pos {
		return 0, false
	}
	var n uint64
	for _, c := range w.b[w.pos : w.pos+size] {
		n = n<<8 | uint64(c)
	}
	w.pos += size
	return n, true
}

// bytesLen reads the length after c as msgpack's bytesLen: a str or a bin
// (0 for a nil).
func (w *msgpackWalker) bytesLen(c byte) (uint64, bool) {
	switch {
	case c == mpNil:
		return 0, true
	case c&0xe0 == mpFixStr:
		return uint64(c & 0x1f), true
	case c == mpStr8 || c == mpBin8:
		return w.uint(1)
	case c == mpStr16 || c == mpBin16:
		return w.uint(2)
	case c == mpStr32 || c == mpBin32:
		return w.uint(4)
	}
	return 0, false
}

// containerLen reads the length after c of a map (isMap) or an array: 0
// for a nil.
func (w *msgpackWalker) containerLen(c byte, isMap bool) (uint64, bool) {
	switch {
	case c == mpNil:
		return 0, true
	case isMap && c&0xf0 == mpFixMap, !isMap && c&0xf0 == mpFixArray:
		return uint64(c & 0x0f), true
	case isMap && c == mpMap16, !isMap && c == mpArray16:
		return w.uint(2)
	case isMap && c == mpMap32, !isMap && c == mpArray32:
		return w.uint(4)
	}
	return 0, false
}

// str reads a string, as DecodeString does, or a field name.
func (w *msgpackWalker) str() ([]byte, bool) {
	c, ok := w.code()
	if !ok {
		return nil, false
	}
	n, ok := w.bytesLen(c)
	start := w.pos
	if !ok || !w.skip(n) {
		return nil, false
	}
	return w.b[start:w.pos], true
}

// structure reads a struct of the layout given, written as a map or an
// array, or a nil.
func (w *msgpackWalker) structure(fields []mpField) bool {
	c, ok := w.code()
	if !ok {
		return false
	}
	if c == mpNil || c&0xf0 == mpFixMap || c == mpMap16 || c == mpMap32 {
		n, ok := w.containerLen(c, true)
		for i := uint64(0); ok && i < n; i++ {
			var name []byte
			if name, ok = w.str(); !ok {
				break
			}
			known := false
			for _, f := range fields {
				if string(name) == f.name {
					ok, known = w.field(f.kind), true
					break
				}
			}
			if !known {
				ok = w.value(1) // skipped
			}
		}
		return ok
	}
	n, ok := w.containerLen(c, false)
	if !ok || n != 0 && n != uint64(len(fields)) {
		return false
	}
	for i := uint64(0); ok && i < n; i++ {
		ok = w.field(fields[i].kind)
	}
	return ok
}

// field reads a field's value as msgpack decodes its kind.
func (w *msgpackWalker) field(kind mpKind) bool {
	switch kind {
	case mpKindString:
		_, ok := w.str()
		return ok
	case mpKindResult:
		// A pointer: a nil leaves it nil, anything else is a Result.
		if w.pos < len(w.b) && w.b[w.pos] == mpNil {
			w.pos++
			return true
		}
		return w.structure(resultLayout())
	}
	c, ok := w.code()
	if !ok {
		return false
	}
	switch kind {
	case mpKindInt:
		return c <= 0x7f || c >= 0xe0 || c == mpNil ||
			c >= mpUint8 && c <= mpInt64 && w.skip(1<<((c-mpUint8)%4)) // uint8 to uint64, then int8 to int64
	case mpKindBool:
		return c == mpNil || c == mpFalse || c == mpTrue
	case mpKindTime:
		return w.time(c)
	case mpKindBytes:
		n, ok := w.bytesLen(c)
		return ok && w.skip(n)
	case mpKindAttempts:
		n, ok := w.containerLen(c, false)
		for i := uint64(0); ok && i < n; i++ {
			ok = w.structure(attemptLayout())
		}
		return ok
	}
	return w.header(c)
}

// time reads a time after its code c: the extension's length, type and
// data. (A nil panics in msgpack, and Unmarshal recovers the panic.)
func (w *msgpackWalker) time(c byte) bool {
	var n uint64
	ok := true
	switch {
	case c >= mpFixExt1 && c <= mpFixExt16:
		n = 1 << (c - mpFixExt1)
	case c >= mpExt8 && c <= mpExt32:
		n, ok = w.uint(1 << (c - mpExt8))
	default:
		return false
	}
	typ, ok2 := w.code()
	return ok && ok2 && typ == mpTimeExt && w.skip(n)
}

// header reads a header map after its code c.
func (w *msgpackWalker) header(c byte) bool {
	// DecodeMapLen skips an extension's header (not its data) before a
	// map.
	extHead := uint64(0)
	switch {
	case c >= mpFixExt1 && c <= mpFixExt16:
		extHead = 1 // the type
	case c >= mpExt8 && c <= mpExt32:
		extHead = 1 + 1<<(c-mpExt8) // the type and the length
	}
	if extHead > 0 {
		if !w.skip(extHead) {
			return false
		}
		var ok bool
		if c, ok = w.code(); !ok {
			return false
		}
	}
	n, ok := w.containerLen(c, true)
	for i := uint64(0); ok && i < n; i++ {
		if _, ok = w.str(); ok {
			ok = w.strings()
		}
	}
	return ok
}

// strings reads a header's values: an array of strings, or a nil.
func (w *msgpackWalker) strings() bool {
	c, ok := w.code()
	if !ok {
		return false
	}
	n, ok := w.containerLen(c, false)
	for i := uint64(0); ok && i < n; i++ {
		_, ok = w.str()
	}
	return ok
}

// value skips a value of any type, as msgpack's Skip does, depth levels
// below the record.
func (w *msgpackWalker) value(depth int) bool {
	c, ok := w.code()
	if !ok || depth > msgpackMaxDepth {
		return false
	}
	switch {
	case c&0xf0 == mpFixMap || c == mpMap16 || c == mpMap32:
		n, ok := w.containerLen(c, true)
		return ok && w.values(2*n, depth+1)
	case c&0xf0 == mpFixArray || c == mpArray16 || c == mpArray32:
		n, ok := w.containerLen(c, false)
		return ok && w.values(n, depth+1)
	}
	return w.scalar(c)
}

// values skips n values, depth levels below the record.
func (w *msgpackWalker) values(n uint64, depth int) bool {
	ok := true
	for i := uint64(0); ok && i < n; i++ {
		ok = w.value(depth)
	}
	return ok
}

// scalar skips the rest of a value that is not a map or an array, after
// its code c.
func (w *msgpackWalker) scalar(c byte) bool {
	switch {
	case c <= 0x7f || c >= 0xe0 || c == mpNil || c == mpFalse || c == mpTrue:
		return true
	case c&0xe0 == mpFixStr || c >= mpStr8 && c <= mpStr32 || c >= mpBin8 && c <= mpBin32:
		n, ok := w.bytesLen(c)
		return ok && w.skip(n)
	case c == mpFloat32 || c == mpFloat64:
		return w.skip(4 << (c - mpFloat32))
	case c >= mpUint8 && c <= mpInt64: // uint8 to uint64, then int8 to int64
		return w.skip(1 << ((c - mpUint8) % 4))
	case c >= mpFixExt1 && c <= mpFixExt16:
		return w.skip(1 + 1<<(c-mpFixExt1)) // the type and the data
	case c >= mpExt8 && c <= mpExt32:
		n, ok := w.uint(1 << (c - mpExt8))
		return ok && w.skip(n+1)
	}
	return false // 0xc1, never used
}
