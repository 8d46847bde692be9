package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/idemkit/idem/backend"
	badger "github.com/idemkit/idem/internal/badger"
	"github.com/idemkit/idem/internal/badger/options"
)

// An engineFloor is the bare point read of the engine under an idem
// contender of the replay-from-disk workload: the Badger directory that
// contender's store wrote, opened with Badger alone (the copy in
// internal/badger that idem uses, read-only, so that it is left as idem
// left it), and read with txn.Get and Item.ValueCopy at the same keys.
// No Store, no backend, no record decoding: what a replay would cost if
// everything above the engine were free.
type engineFloor struct {
	name   string
	budget int64 // the idem contender's Options.MemoryBudget; zero for the default
}

// engineFloors maps the idem contenders of the replay-from-disk workload
// to the floor measured on their directories.
var engineFloors = map[string]engineFloor{
	"idem":          {name: "badger-get", budget: 0},
	"idem-budget32": {name: "badger-get-budget32", budget: budgetContenderBytes},
}

// info is the floor's line in the report's list of contenders.
func (f engineFloor) info(of string) ContenderInfo {
	return ContenderInfo{Name: f.name, Kind: "limit", Durable: true,
		Config: fmt.Sprintf("the bare point read of the engine under %s (replay-from-disk workloads only): the Badger "+
			"directory %s wrote, opened read-only with Badger alone (internal/badger, idem's copy) and the read "+
			"options of %s's budget (no block cache, index cache of a 32nd of %d MiB, a block's checksum verified "+
			"on its read), read with db.View, txn.Get and Item.ValueCopy of the record's key at the same keys in "+
			"the same order; no Store, no backend, no record decoded", of, of, of, backend.MemoryBudget(f.budget)>>20)}
}

// openFloor opens dir, which an idem store on Badger wrote and closed,
// with Badger alone. The read options follow badgerstore's for the
// budget (badgerstore/memory.go: no block cache, an index cache of a
// 32nd of the budget; badgerstore.go: checksums on block reads); each
// table's compression is the one its manifest records.
func (f engineFloor) open(dir string) (*badger.DB, error) {
	bo := badger.DefaultOptions(dir).
		WithReadOnly(true).
		WithBlockCacheSize(0).
		WithIndexCacheSize(backend.MemoryBudget(f.budget) / 32).
		WithChecksumVerificationMode(options.OnBlockRead).
		WithMetricsEnabled(false).
		WithLogger(nil)
	return badger.Open(bo)
}

// recordKey is badgerstore's key of the record of key in the default
// scope: the record prefix 'r', the scope's length (0), the key
// (badgerstore/badgerstore.go, recordID and withPrefix).
func recordKey(key string) []byte {
	k := make([]byte, 0, 2+len(key))
	k = append(k, 'r', 0)
	return append(k, key...)
}

// floorRead is one bare point read of key in db: a read transaction, a
// Get and a copy of the value, as a user of Badger would write it.
func floorRead(db *badger.DB, key []byte) ([]byte, error) {
	var v []byte
	err := db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	return v, err
}

// measureFloor opens the floor on dir, checks that it holds idem's
// records of keys, and measures one repetition at g goroutines with the
// keys that seed draws; bkeys are the records' keys (recordKey) of keys.
// The caller has closed the idem store on dir.
func (s *Suite) measureFloor(ctx context.Context, f engineFloor, dir string, keys []string, bkeys [][]byte,
	seed uint64, g int) (float64, map[string]any, error) {
	db, err := f.open(dir)
	if err != nil {
		return 0, nil, fmt.Errorf("open badger: %w", err)
	}
	defer db.Close()
	// The records are idem's: each holds the saved result (unencrypted).
	for _, k := range keys[:min(len(keys), 64)] {
		v, err := floorRead(db, recordKey(k))
		if err != nil {
			return 0, nil, fmt.Errorf("key %q: %w", k, err)
		}
		if !bytes.Contains(v, benchResult) {
			return 0, nil, fmt.Errorf("key %q: a value of %d bytes without the saved result", k, len(v))
		}
	}
	idleMs := ms(waitIdle(ctx, time.Minute))
	s.quiesce(ctx)
	op := func(ctx context.Context, i int) error {
		v, err := floorRead(db, bkeys[uniform(seed, i, len(keys))])
		if err == nil && len(v) == 0 {
			err = fmt.Errorf("empty value")
		}
		return err
	}
	rate, per, err := runCosted(ctx, g, s.plan.Warm, s.plan.Duration, s.plan.MaxOps, op, "")
	if per == nil {
		per = map[string]any{}
	}
	per["idle_wait_ms"] = idleMs
	return rate, per, err
}

// addContenderInfo lists c among the run's contenders, once.
func (s *Suite) addContenderInfo(c ContenderInfo) {
	if !slices.ContainsFunc(s.res.Contenders, func(o ContenderInfo) bool { return o.Name == c.Name }) {
		s.res.Contenders = append(s.res.Contenders, c)
	}
}
