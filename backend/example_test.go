package backend_test

import (
	"errors"
	"fmt"

	"github.com/idemkit/idem/backend"
)

func ExampleValidateKey() {
	fmt.Println(backend.ValidateKey("550e8400-e29b-41d4-a716-446655440000"))
	fmt.Println(errors.Is(backend.ValidateKey(""), backend.ErrInvalidKey))
	fmt.Println(backend.ValidateKey("caf\u00e9"))
	// Output:
	// <nil>
	// true
	// idem: invalid idempotency key: byte 0xc3 at offset 3 is not printable ASCII
}

// A backend that keeps the result in a column of its own encodes it with
// EncodeResult and reads it back with DecodeResult; damaged bytes are
// ErrCorrupt.
func ExampleEncodeResult() {
	b := backend.EncodeResult(&backend.Result{Status: 201, Body: []byte(`{"refund":"r_1"}`)})
	res, err := backend.DecodeResult(b)
	fmt.Println(res.Status, string(res.Body), err)
	_, err = backend.DecodeResult(b[:len(b)-3])
	fmt.Println(errors.Is(err, backend.ErrCorrupt))
	// Output:
	// 201 {"refund":"r_1"} <nil>
	// true
}
