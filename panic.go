package idem

import "sync"

// panicNote is the word a record's story uses for an effect that panicked.
const panicNote = "panic"

// maxPanicNotes bounds the claims a Store remembers as held after a panic:
// past it, a held claim's story says only how recovery decided.
const maxPanicNotes = 4096

// panicNotes remembers the claims this Store held because their effect
// panicked, so that recovery's ending of the claim says "panic" in the
// record's story (a Backend keeps no note on a held claim). It lives in
// memory: a claim held by an earlier process, or resolved by another one,
// ends without the note. The zero value is ready.
type panicNotes struct {
	mu sync.Mutex // guards m
	m  map[flightKey]struct{}
}

// note remembers c's claim as held after a panic.
func (p *panicNotes) note(c *Claim) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = make(map[flightKey]struct{})
	}
	if len(p.m) < maxPanicNotes {
		p.m[flightKey{c.scope, c.key, c.token}] = struct{}{}
	}
}

// take reports whether rec's claim was held after a panic, and forgets it.
func (p *panicNotes) take(rec *Record) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := flightKey{rec.Scope, rec.Key, rec.Token}
	_, ok := p.m[k]
	delete(p.m, k)
	return ok
}

// notePanic remembers that c is held because its effect panicked.
func (s *Store) notePanic(c *Claim) { s.panics.note(c) }
