package idem

import (
	"sync"

	"github.com/idemkit/idem/backend"
)

// panicNote is the word a record's story uses for an effect that panicked.
const panicNote = "panic"

// maxPanicNotes bounds the claims a Store remembers as held after a panic:
// past it, a held claim's story says only how recovery decided.
const maxPanicNotes = 4096

// panicNotes remembers the claims this Store held because their effect
// panicked, so that recovery's ending of the claim says "panic" in the
// record's story, on a backend that keeps no note with a held claim (not a
// backend.Holder; one that is keeps the note in the claim's attempt). It
// lives in memory: on such a backend a claim held by an earlier process, or
// resolved by another one, ends without the note. The zero value is ready.
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

// notePanic remembers that c is held because its effect panicked, unless
// the backend keeps the note itself.
func (s *Store) notePanic(c *Claim) {
	if _, ok := s.b.(backend.Holder); !ok {
		s.panics.note(c)
	}
}

// panicked reports whether rec's claim was held because its effect
// panicked: its open attempt carries the note (backend.Holder), or this
// Store remembers it.
func (s *Store) panicked(rec *Record) bool {
	if n := len(rec.Attempts); n > 0 {
		if a := rec.Attempts[n-1]; a.Token == rec.Token && a.EndedAt.IsZero() && a.Reason == panicNote {
			s.panics.take(rec)
			return true
		}
	}
	return s.panics.take(rec)
}
