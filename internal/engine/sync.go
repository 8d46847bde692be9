package engine

import (
	"fmt"
)

// The states in which the syncer hands a unit to the applier.
const (
	unitFailed    = iota + 1 // nothing of it holds; its ops got the error
	unitEmpty                // it wrote nothing
	unitCommitted            // Badger holds it (Fast)
	unitLogged               // durable in the log, to commit to Badger
)

// syncer finishes the units the committer hands it, one at a time: it
// asks for the next by sending on ready. It hands every unit on to the
// applier, in order, once its ops are answered.
func (e *Engine) syncer(p *pipe) {
	defer close(p.syncerDone)
	for {
		select {
		case p.ready <- struct{}{}:
			select {
			case u := <-p.units:
				e.finish(u, p)
			case <-p.quit:
				return
			}
		case <-p.quit:
			return
		}
	}
}

// finish makes u durable and answers its ops: the log frame and its sync
// (Durable), or the Badger commit (Fast), then the ops' OnCommit hooks in
// order. Under Durable the applier commits u to Badger afterwards, while
// the ops' callers go on and the syncer logs the next unit. If any step
// fails, the engine stops writing until it is reopened: later units read
// u's writes from the pending index, so they cannot go on as if u had not
// been.
func (e *Engine) finish(u *unit, p *pipe) {
	if err := e.brokenErr(); err != nil {
		e.fail(u, err, p)
		return
	}
	wrote := false
	for _, t := range u.bufs {
		wrote = wrote || t != nil
	}
	switch {
	case !wrote:
		u.state = unitEmpty
	case e.log == nil:
		if err := u.ws.Commit(); err != nil {
			e.fail(u, e.breakWith(fmt.Errorf("commit: %w", err)), p)
			return
		}
		u.state = unitCommitted
	default:
		if e.opts.BeforeLog != nil {
			e.opts.BeforeLog(u.seq)
		}
		if err := e.logUnit(u); err != nil {
			e.fail(u, e.breakWith(err), p)
			return
		}
		// Durable once synced: answer now, and let the applier commit to
		// Badger. Until it does, readers find u's writes pending.
		e.durable.Store(u.seq)
		u.state = unitLogged
	}
	// The hooks run before the applier may commit u: once it has, the
	// committer no longer finds u's writes pending, and reads what the
	// hooks left in Options.Resident.
	for _, t := range u.bufs {
		if t != nil {
			for _, fn := range t.after {
				fn()
			}
		}
	}
	// A lone caller is woken after the applier, a group's callers before
	// it (docs/engine.md, "Wake-up order").
	if len(u.ops) == 1 {
		// The applier may recycle u once it has it.
		o, r := u.ops[0], u.results[0]
		e.handApplier(p, u, true)
		o.done <- r
		return
	}
	e.wake(u)
	e.handApplier(p, u, false)
}

// handApplier hands u to the applier. A lone unit (lazy) does not wake it
// until lazyUnits wait, or someone settles: the wake-up is a futex call on
// the lone caller's path, about 9 µs on the development machine, where the
// Badger commit it leads to is off that path anyway. The writes of the
// units waiting stay in the pending index, where every read finds them
// (docs/engine.md, "The applier, woken in batches").
func (e *Engine) handApplier(p *pipe, u *unit, lazy bool) {
	select {
	case p.applied <- u:
	default:
		e.wakeApplier() // full: never wait on an applier asleep
		p.applied <- u
	}
	// After the send: a settle that began before this load is woken by
	// its own kick, which comes after this send (settle).
	if !lazy || len(p.applied) >= lazyUnits || e.settling.Load() > 0 {
		e.wakeApplier()
	}
}

// wakeApplier wakes the applier if it sleeps, or has it look for units
// once more before it does.
func (e *Engine) wakeApplier() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// fail answers u's ops with err: nothing of u is durable, readers never
// look at its pending writes, and the applier lets the committer retire
// them.
func (e *Engine) fail(u *unit, err error, p *pipe) {
	u.state = unitFailed
	for i := range u.ops {
		if u.results[i] == nil || u.bufs[i] != nil {
			u.results[i] = err
		}
		u.ops[i].done <- u.results[i]
	}
	e.handApplier(p, u, false)
}

// wake answers u's ops.
func (e *Engine) wake(u *unit) {
	for i, o := range u.ops {
		o.done <- u.results[i]
	}
}

// applier commits logged units to Badger in the order they were synced,
// and marks each unit retired once Badger holds it (or once nothing of it
// is to hold), in order, so that the committer drops a unit's pending
// writes only when a transaction begun afterwards reads them from Badger.
// After a failed commit it commits nothing more and retires nothing:
// readers keep finding the durable writes pending, and the log holds
// them for the reopen.
func (e *Engine) applier(units <-chan *unit, done chan<- struct{}) {
	defer close(done)
	stuck := false // a logged unit is not in Badger: retire nothing more
	for {
		var u *unit
		select {
		case next, ok := <-units:
			if !ok {
				return
			}
			u = next
		default:
			// Nothing to apply: sleep until kicked (handApplier), so
			// that a unit sent to the channel wakes no one by itself.
			<-e.kick
			continue
		}
		switch {
		case u.state == unitLogged && !stuck && e.brokenErr() == nil:
			if e.opts.BeforeApply != nil {
				e.opts.BeforeApply(u.seq)
			}
			if err := u.ws.Commit(); err != nil {
				e.breakWith(fmt.Errorf("commit: %w", err))
				stuck = true
			}
		case u.state == unitLogged:
			stuck = true
		}
		u.discard()
		if !stuck {
			e.retired.Store(u.seq)
		}
		u.recycle()
		e.settleMu.Lock()
		e.settleCond.Broadcast()
		e.settleMu.Unlock()
	}
}

// settle waits until Badger holds every answered write, for readers that
// scan Badger rather than Read one key. Once writing stopped, it does not
// wait.
func (e *Engine) settle() {
	d := e.durable.Load()
	if d <= e.retired.Load() {
		return
	}
	// Counted before the kick: a lone unit handed over after it wakes
	// the applier too (handApplier).
	e.settling.Add(1)
	defer e.settling.Add(-1)
	e.wakeApplier()
	e.settleMu.Lock()
	for e.retired.Load() < d && e.brokenErr() == nil {
		e.settleCond.Wait()
	}
	e.settleMu.Unlock()
}

// breakWith records the failure that stops writing, and returns the error
// ops get from now on.
func (e *Engine) breakWith(err error) error {
	e.brokenMu.Lock()
	defer e.brokenMu.Unlock()
	if e.broken == nil {
		e.broken = fmt.Errorf("a commit failed; reopen the store to recover: %w", err)
	}
	return e.broken
}

// brokenErr returns the error that stopped writing, if any.
func (e *Engine) brokenErr() error {
	e.brokenMu.Lock()
	defer e.brokenMu.Unlock()
	return e.broken
}

// logUnit makes the writes of u durable in the log before its
// transaction is committed: one frame, one sync.
func (e *Engine) logUnit(u *unit) error {
	l := e.log
	l.Begin()
	for _, t := range u.bufs {
		if t != nil {
			for _, en := range t.ents {
				l.Add(en)
			}
		}
	}
	if l.Full() {
		// The log may start afresh only once Badger holds, and has
		// synced, everything logged so far.
		e.settle()
		if err := e.brokenErr(); err != nil {
			return err
		}
		if err := e.checkpoint(); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := l.Commit(); err != nil {
		return fmt.Errorf("log write: %w", err)
	}
	return nil
}
