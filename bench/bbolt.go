package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bboltContenders returns bbolt with its default, durable options (every
// read-write transaction fsyncs on commit), writing each claim and each
// completion in its own transaction (DB.Update) or letting bbolt coalesce
// concurrent ones into one commit (DB.Batch).
func bboltContenders() []Contender {
	desc := func(how string) string {
		return "go.etcd.io/bbolt v1.5.0, default options (fsync at every commit); one bucket, key -> " +
			"record (state, lease, expiry, fingerprint, result); Begin reads in a View, then claims an absent " +
			"key in " + how + " (read and put in one read-write transaction: the writer lock is the lock), " +
			"Complete puts the done record the same way"
	}
	return []Contender{
		{Name: "bbolt-update", Kind: "peer", Durable: true, Portable: true, Config: desc("DB.Update (one commit per write)"),
			Open: func(ctx context.Context, dir string) (Store, error) { return openBbolt(dir, false) }},
		{Name: "bbolt-batch", Kind: "peer", Durable: true, Portable: true, SameData: "bbolt-update",
			Config: desc("DB.Batch (concurrent writes share a commit; MaxBatchDelay 10ms)"),
			Open:   func(ctx context.Context, dir string) (Store, error) { return openBbolt(dir, true) }},
	}
}

// bboltBucket holds the records.
const bboltBucket = "idem"

// bboltStore is the bbolt peer.
type bboltStore struct {
	db    *bolt.DB
	batch bool
}

func openBbolt(dir string, batch bool) (*bboltStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	db, err := bolt.Open(filepath.Join(dir, "idem.bolt"), 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists([]byte(bboltBucket))
		return err
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &bboltStore{db: db, batch: batch}, nil
}

// write runs fn in a read-write transaction of its own, or in a batch.
// A batched fn may run more than once; every fn here decides from what it
// reads, so a rerun decides again.
func (s *bboltStore) write(fn func(*bolt.Tx) error) error {
	if s.batch {
		return s.db.Batch(fn)
	}
	return s.db.Update(fn)
}

// Begin implements Claimer.
func (s *bboltStore) Begin(ctx context.Context, key, fp string) (Attempt, error) {
	k := []byte(key)
	var a Attempt
	var found bool
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket([]byte(bboltBucket)).Get(k)
		if v == nil {
			return nil
		}
		found = true
		r, err := decodeRecord(v)
		if err != nil {
			return err
		}
		a, err = attemptOf(r, fp)
		a.Saved = append([]byte(nil), a.Saved...) // v lives only in the transaction
		return err
	})
	if err != nil || found {
		return a, err
	}
	claim := claimRecord(fp, time.Now()).encode()
	err = s.write(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bboltBucket))
		if v := b.Get(k); v != nil {
			r, err := decodeRecord(v)
			if err != nil {
				return err
			}
			a, err = attemptOf(r, fp)
			a.Saved = append([]byte(nil), a.Saved...)
			return err
		}
		a = Attempt{Outcome: Claimed, handle: fp}
		return b.Put(k, claim)
	})
	return a, err
}

// Complete implements Claimer.
func (s *bboltStore) Complete(ctx context.Context, key string, a Attempt, result []byte) error {
	done := doneRecord(a.handle.(string), result, time.Now()).encode()
	return s.write(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bboltBucket))
		v := b.Get([]byte(key))
		if v == nil || v[0] != stateInProgress {
			return fmt.Errorf("bbolt: complete of %q: no claim", key)
		}
		return b.Put([]byte(key), done)
	})
}

// putAll writes one record per key in transactions of 10,000 puts.
func (s *bboltStore) putAll(keys []string, value []byte) error {
	for len(keys) > 0 {
		n := min(len(keys), 10000)
		err := s.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte(bboltBucket))
			for _, k := range keys[:n] {
				if err := b.Put([]byte(k), value); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

// Fill implements Dataset.
func (s *bboltStore) Fill(ctx context.Context, keys []string, result []byte) error {
	return s.putAll(keys, doneRecord(benchFP, result, time.Now()).encode())
}

// Abandon implements Dataset: the claims' leases have just ended.
func (s *bboltStore) Abandon(ctx context.Context, keys []string) error {
	r := record{State: stateInProgress, FP: benchFP, LeaseEnds: time.Now().UnixNano()}
	return s.putAll(keys, r.encode())
}

// Sweep implements Dataset: bbolt has no secondary index, so the sweep
// walks the bucket (an index would be a second bucket written on every
// claim and completion).
func (s *bboltStore) Sweep(ctx context.Context, result []byte) (int, error) {
	now := time.Now()
	var stale [][]byte
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(bboltBucket)).ForEach(func(k, v []byte) error {
			if len(v) > 0 && v[0] == stateInProgress {
				r, err := decodeRecord(v)
				if err != nil {
					return err
				}
				if r.LeaseEnds < now.UnixNano() {
					stale = append(stale, append([]byte(nil), k...))
				}
			}
			return nil
		})
	})
	if err != nil || len(stale) == 0 {
		return 0, err
	}
	done := doneRecord(benchFP, result, now).encode()
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bboltBucket))
		for _, k := range stale {
			if err := b.Put(k, done); err != nil {
				return err
			}
		}
		return nil
	})
	return len(stale), err
}

// Close implements Store.
func (s *bboltStore) Close() error { return s.db.Close() }
