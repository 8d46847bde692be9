package idem

import "github.com/idemkit/idem/badgerstore"

// memStore opens a Store on the embedded backend in memory.
func memStore(o *Options) (*Store, error) {
	b, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
	if err != nil {
		return nil, err
	}
	return New(b, o), nil
}
