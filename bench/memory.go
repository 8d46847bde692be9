package main

import (
	"context"
	"sync"
	"time"
)

// memoryContender is a map guarded by a mutex: the store a prototype
// starts with. Nothing survives the process, so it is neither durable nor
// crash-safe; it bounds what any store can do in memory.
func memoryContender() Contender {
	return Contender{
		Name: "map", Kind: "peer", Durable: false,
		Config: "map[string]*record guarded by one sync.Mutex; nothing survives the process",
		Open: func(ctx context.Context, ns string) (Store, error) {
			return &memStore{m: map[string]*record{}}, nil
		},
	}
}

// memStore is the in-memory peer.
type memStore struct {
	// mu guards m and every record in it.
	mu sync.Mutex
	m  map[string]*record
}

// Begin implements Claimer.
func (s *memStore) Begin(ctx context.Context, key, fp string) (Attempt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.m[key]; ok {
		return attemptOf(*r, fp)
	}
	r := claimRecord(fp, time.Now())
	s.m[key] = &r
	return Attempt{Outcome: Claimed}, nil
}

// Complete implements Claimer.
func (s *memStore) Complete(ctx context.Context, key string, a Attempt, result []byte) error {
	res := append([]byte(nil), result...)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.m[key]
	r.State, r.Result, r.ExpiresAt = stateDone, res, now.Add(retention).UnixNano()
	return nil
}

// Fill implements Dataset.
func (s *memStore) Fill(ctx context.Context, keys []string, result []byte) error {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		r := doneRecord(benchFP, append([]byte(nil), result...), now)
		s.m[k] = &r
	}
	return nil
}

// Abandon implements Dataset: the claims' leases have just ended.
func (s *memStore) Abandon(ctx context.Context, keys []string) error {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		s.m[k] = &record{State: stateInProgress, FP: benchFP, LeaseEnds: now.UnixNano()}
	}
	return nil
}

// Sweep implements Dataset: a map has no index, so it looks at every
// record.
func (s *memStore) Sweep(ctx context.Context, result []byte) (int, error) {
	now := time.Now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.m {
		if r.State == stateInProgress && r.LeaseEnds < now {
			r.State, r.Result = stateDone, append([]byte(nil), result...)
			n++
		}
	}
	return n, nil
}

// Close implements Store.
func (s *memStore) Close() error { return nil }

// Volatile tells the workloads that reopen stores (recovery, replay from
// disk) not to close this one: a map does not survive Close.
func (s *memStore) Volatile() bool { return true }
