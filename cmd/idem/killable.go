package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
)

// killable is the store's Badger backend with a kill switch. Once killed,
// every call fails at once, as if the process had died: nothing more
// reaches the disk, and the claims open at that instant stay open for the
// next process to recover. (Store.Close alone is a graceful stop: it lets
// running requests record their results.) Calls already inside Badger
// when the switch flips finish, as writes that reached the disk before a
// kill do.
type killable struct {
	*badgerstore.Backend
	dead atomic.Bool
}

var (
	_ backend.Backend = (*killable)(nil)
	_ backend.Tallier = (*killable)(nil)
	_ backend.Lister  = (*killable)(nil)
)

func (k *killable) kill() { k.dead.Store(true) }

func (k *killable) alive() error {
	if k.dead.Load() {
		return fmt.Errorf("%w: the process was killed", idem.ErrUnavailable)
	}
	return nil
}

func (k *killable) Claim(ctx context.Context, scope, key string, args backend.ClaimArgs) (*idem.Record, bool, error) {
	if err := k.alive(); err != nil {
		return nil, false, err
	}
	return k.Backend.Claim(ctx, scope, key, args)
}

func (k *killable) Complete(ctx context.Context, scope, key string, token uint64, c backend.Completion) error {
	if err := k.alive(); err != nil {
		return err
	}
	return k.Backend.Complete(ctx, scope, key, token, c)
}

func (k *killable) Release(ctx context.Context, scope, key string, token uint64, r backend.Releasing) error {
	if err := k.alive(); err != nil {
		return err
	}
	return k.Backend.Release(ctx, scope, key, token, r)
}

func (k *killable) Extend(ctx context.Context, scope, key string, token uint64, leaseEnds time.Time) error {
	if err := k.alive(); err != nil {
		return err
	}
	return k.Backend.Extend(ctx, scope, key, token, leaseEnds)
}

func (k *killable) Defer(ctx context.Context, scope, key string, token uint64, d backend.Deferral) error {
	if err := k.alive(); err != nil {
		return err
	}
	return k.Backend.Defer(ctx, scope, key, token, d)
}

func (k *killable) Get(ctx context.Context, scope, key string) (*idem.Record, error) {
	if err := k.alive(); err != nil {
		return nil, err
	}
	return k.Backend.Get(ctx, scope, key)
}

func (k *killable) Stale(ctx context.Context, now time.Time, limit int) ([]*idem.Record, error) {
	if err := k.alive(); err != nil {
		return nil, err
	}
	return k.Backend.Stale(ctx, now, limit)
}

func (k *killable) Reclaim(ctx context.Context, now time.Time, limit int) ([]backend.Ref, error) {
	if err := k.alive(); err != nil {
		return nil, err
	}
	return k.Backend.Reclaim(ctx, now, limit)
}

func (k *killable) AddTallies(ctx context.Context, tallies []backend.Tally) error {
	if err := k.alive(); err != nil {
		return err
	}
	return k.Backend.AddTallies(ctx, tallies)
}

func (k *killable) Maintain(ctx context.Context) error {
	if err := k.alive(); err != nil {
		return err
	}
	return k.Backend.Maintain(ctx)
}

func (k *killable) Scan(ctx context.Context, fn func(*idem.Record) bool) error {
	if err := k.alive(); err != nil {
		return err
	}
	return k.Backend.Scan(ctx, fn)
}
