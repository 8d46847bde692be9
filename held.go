package idem

import (
	"fmt"
	"strings"
	"sync"
)

// panicNote is the word a record's story uses for an effect that panicked.
const panicNote = "panic"

// heldByHolder is the note of a claim its holder held (Claim.Hold).
const heldByHolder = "held"

// policyHoldNote starts the note of a claim the error policy held.
const policyHoldNote = "held by the error policy"

// maxHeldNotes bounds the claims a Store remembers as held with a note:
// past it, a held claim's story says only how recovery decided.
const maxHeldNotes = 4096

// policyHold is the note of a claim the error policy held after fn
// returned res and err: the text Options.ErrorText makes of err, never
// err's own, or the result's status.
func (s *Store) policyHold(res Result, err error) string {
	switch {
	case err != nil:
		return policyHoldNote + ": " + s.errorText(err)
	case res.Status != 0:
		return fmt.Sprintf("%s: status %d", policyHoldNote, res.Status)
	}
	return policyHoldNote
}

// heldNotes remembers why this Store held claims (a panic, the error
// policy's hold), so that recovery's ending of the claim says why in the
// record's story, on a backend that keeps no note with a held claim (not a
// backend.Holder; one that is keeps the note in the claim's attempt, where
// every process reads it). It lives in memory: on such a backend a claim
// held by an earlier process, or resolved by another one, ends without the
// note. The zero value is ready.
type heldNotes struct {
	mu sync.Mutex // guards m
	m  map[flightKey]string
}

// note remembers c's claim as held for why.
func (p *heldNotes) note(c *Claim, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = make(map[flightKey]string)
	}
	if len(p.m) < maxHeldNotes {
		p.m[flightKey{c.scope, c.key, c.token}] = why
	}
}

// take returns why rec's claim was held, if remembered, and forgets it.
func (p *heldNotes) take(rec *Record) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := flightKey{rec.Scope, rec.Key, rec.Token}
	why := p.m[k]
	delete(p.m, k)
	return why
}

// has reports whether rec's claim is remembered as held, leaving the
// note in place.
func (p *heldNotes) has(rec *Record) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.m[flightKey{rec.Scope, rec.Key, rec.Token}]
	return ok
}

// heldHere reports whether rec's claim was held (its open attempt's note
// says so, or this Store remembers holding it), without taking the note.
func (s *Store) heldHere(rec *Record) bool {
	return attemptHeldNote(rec) != "" || s.held.has(rec)
}

// heldNote returns why rec's claim was held: the note of its open attempt
// (backend.Holder), or what this Store remembers; empty if neither says.
func (s *Store) heldNote(rec *Record) string {
	why := s.held.take(rec)
	if note := attemptHeldNote(rec); note != "" {
		return note
	}
	return why
}

// attemptHeldNote returns the note of rec's open attempt when it says why
// the claim was held (a backend.Holder keeps it there), else "".
func attemptHeldNote(rec *Record) string {
	if n := len(rec.Attempts); n > 0 {
		if a := rec.Attempts[n-1]; a.Token == rec.Token && a.EndedAt.IsZero() && heldReason(a.Reason) {
			return a.Reason
		}
	}
	return ""
}

// heldReason reports whether note, an open attempt's, says why a claim
// was held (rather than, say, that a restart orphaned it).
func heldReason(note string) bool {
	return note == panicNote || note == heldByHolder || strings.HasPrefix(note, policyHoldNote)
}
