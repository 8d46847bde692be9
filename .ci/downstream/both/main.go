// Command both links released Badger beside idem and opens a store of
// each: idem's copy of the engine registers its protobuf types and expvar
// names under names of its own, so neither panics at init.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/dgraph-io/badger/v4"
	"github.com/idemkit/idem"
)

func main() {
	dir, err := os.MkdirTemp("", "idem-both-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	db, err := badger.Open(badger.DefaultOptions(filepath.Join(dir, "badger")).WithLogger(nil))
	if err != nil {
		fail(err)
	}
	if err := db.Close(); err != nil {
		fail(err)
	}
	s, err := idem.Open(filepath.Join(dir, "idem"), nil)
	if err != nil {
		fail(err)
	}
	if err := s.Close(); err != nil {
		fail(err)
	}
	fmt.Println("released Badger and idem in one program: both open and close")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "both:", err)
	os.Exit(1)
}
