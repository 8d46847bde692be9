package backend

import (
	"context"
	"slices"
	"time"
)

// LateCompleter is implemented by backends that can record a late
// completion: the outcome of a claim whose Complete was fenced because
// recovery had ended it. Both steps are atomic with the check of the
// record's state (a compare-and-set): a record that changes meanwhile is
// judged as it is when written.
type LateCompleter interface {
	// CompleteLate decides on the record of (scope, key) as it is now:
	//
	//   - not stored, released, or still in progress with token: it
	//     becomes done with l.Result, l.Fingerprint, l.At as DoneAt and
	//     l.ExpiresAt, as Complete would make it (a record that was not
	//     stored starts a new life: token, Claims 1, FirstSeen and
	//     ClaimedAt l.ClaimedAt, l.Retention); its story is l.Story(...,
	//     false). It returns LateRecorded;
	//   - done with token: nothing changes; LateRecorded;
	//   - in progress or done with another token (expired or not): only
	//     MayHaveRunTwice is set and the story becomes l.Story(..., true);
	//     the state, result, lease and counts stay. It returns LateRanTwice.
	//
	// A record marked MayHaveRunTwice keeps the mark through the rest of
	// its life: Complete, Release, Defer and a new claim of a released
	// record keep it; only a new life (an expired record claimed again)
	// starts without it.
	CompleteLate(ctx context.Context, scope, key string, token uint64, l LateCompletion) (LateOutcome, error)
}

// LateOutcome is what CompleteLate did.
type LateOutcome uint8

// The outcomes of CompleteLate.
const (
	// LateRecorded: the late result is the record's result (or already was).
	LateRecorded LateOutcome = iota + 1
	// LateRanTwice: another holder had claimed the key; the record is
	// marked MayHaveRunTwice.
	LateRanTwice
)

// LateCompletion describes a late completion: the completion the fenced
// Complete carried, with what a backend needs to build the record anew
// or to add the attempt to its story.
type LateCompletion struct {
	// Completion is the fenced one; its Ending is the late attempt's end
	// when the result is recorded.
	Completion
	// Fingerprint, Retention, ClaimedAt and Owner are the late claim's.
	Fingerprint string
	Retention   time.Duration
	ClaimedAt   time.Time
	Owner       string
	// Twice is the late attempt's end when the key was claimed again.
	Twice Ending
}

// Story returns attempts (not changed) with the late attempt ended: the
// attempt with token takes the Ending (Twice if twice) as Record.Attempts
// documents for an Ending; if the story no longer holds it, it is added in
// token order, and the story kept to KeptAttempts (the first and latest).
func (l LateCompletion) Story(attempts []Attempt, token uint64, twice bool) []Attempt {
	e := l.Ending
	if twice {
		e = l.Twice
	}
	out := slices.Clone(attempts)
	for i := range out {
		if a := &out[i]; a.Token == token {
			a.EndedAt, a.Outcome, a.Status = e.At, e.Outcome, e.Status
			if e.Reason != "" {
				a.Reason = e.Reason
			}
			return out
		}
	}
	i, _ := slices.BinarySearchFunc(out, token, func(a Attempt, t uint64) int {
		switch {
		case a.Token < t:
			return -1
		case a.Token > t:
			return 1
		}
		return 0
	})
	out = slices.Insert(out, i, Attempt{Token: token, ClaimedAt: l.ClaimedAt, Owner: l.Owner,
		EndedAt: e.At, Outcome: e.Outcome, Reason: e.Reason, Status: e.Status})
	if n := len(out); n > KeptAttempts {
		out = append(out[:1], out[n-KeptAttempts+1:]...)
	}
	return out
}
