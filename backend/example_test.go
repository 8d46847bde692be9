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
