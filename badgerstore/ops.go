package badgerstore

import (
	"errors"
	"sync"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/internal/engine"
)

// cycleOp holds what a claim or a completion, the two ops of every cycle,
// needs on the committer: written as closures, what they capture (the
// claim's arguments, the completion, the hook that mirrors the open
// claims) moved to the heap at every call, about 0.8 KB a cycle, and the
// completion decoded the claim into a record of its own. An op comes from
// a pool and goes back once the engine has answered it: its run and hook
// functions are bound once, when the pool makes it.
type cycleOp struct {
	b          *Backend
	scope, key string
	rk, id     []byte // the record's key, and its id (rk without the prefix)
	// The claim's.
	args    backend.ClaimArgs
	stamp   engine.Stamp
	out     *backend.Record
	claimed bool
	// The completion's: the claim is decoded into space.
	token uint64
	comp  backend.Completion
	space backend.RecordSpace
	// What mirror puts in the open claims once the write is durable.
	open      openClaim
	stillOpen bool

	claimFn, completeFn func(*engine.Txn) error
	mirrorFn            func()
}

var cycleOps = sync.Pool{New: func() any {
	o := new(cycleOp)
	o.claimFn, o.completeFn, o.mirrorFn = o.claim, o.complete, o.mirror
	return o
}}

// newCycleOp returns an op of b on (scope, key), whose record key is rk.
func (b *Backend) newCycleOp(scope, key string, rk []byte) *cycleOp {
	o := cycleOps.Get().(*cycleOp)
	o.b, o.scope, o.key = b, scope, key
	o.rk, o.id = rk, rk[1:]
	return o
}

// done puts o back for reuse if the engine answered it (err, from Update,
// is not ErrClosed, which fromEngine makes of the engine's): an op left when the committer stopped may still run.
// Nothing o refers to is kept.
func (o *cycleOp) done(err error) {
	if errors.Is(err, backend.ErrClosed) {
		return
	}
	claimFn, completeFn, mirrorFn := o.claimFn, o.completeFn, o.mirrorFn
	*o = cycleOp{claimFn: claimFn, completeFn: completeFn, mirrorFn: mirrorFn}
	cycleOps.Put(o)
}

// claim is Claim's op on the committer.
func (o *cycleOp) claim(t *engine.Txn) error {
	b := o.b
	// A key the peek found absent is not looked up in Badger again (a
	// fresh key: most claims).
	rec, _, err := b.readRecordAt(t, o.id, o.rk, o.stamp, nil)
	if err != nil {
		return err
	}
	o.claimed = false
	if rec != nil && rec.State != backend.StateReleased && !rec.Expired(o.args.Now) {
		o.out = rec
		return engine.ErrNoWrite
	}
	n := b.claimRecord(t, o.scope, o.key, o.id, o.args, rec)
	o.set(t, n, time.Time{})
	o.out, o.claimed = n, true
	return nil
}

// complete is Complete's op on the committer.
func (o *cycleOp) complete(t *engine.Txn) error {
	rec, _, err := o.b.readRecordAt(t, o.id, o.rk, engine.Stamp{}, &o.space)
	if err != nil {
		return err
	}
	if err := fence(rec, backend.StateInProgress, o.scope, o.key, o.token); err != nil {
		return err
	}
	// The body is not copied: set encodes rec before Complete returns,
	// and keeps only the encoding.
	completeRecord(t, o.id, rec, o.token, &o.comp)
	o.set(t, rec, o.comp.At)
	return nil
}

// set writes rec as put does, with o's hook to mirror it.
func (o *cycleOp) set(t *engine.Txn, rec *backend.Record, ttlFrom time.Time) {
	o.open, o.stillOpen = o.b.setRecord(t, o.rk, rec, ttlFrom)
	t.OnCommit(o.mirrorFn)
}

// mirror is set's hook: it runs once the write is durable.
func (o *cycleOp) mirror() { o.b.mirror(o.id, o.open, o.stillOpen) }
