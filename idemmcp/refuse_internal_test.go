package idemmcp

import (
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idem"
)

// TestRefuse_OutcomeNotRecorded: an effect whose outcome was not recorded
// is never answered "unavailable, retry safely", and carries no retry hint.
func TestRefuse_OutcomeNotRecorded(t *testing.T) {
	g := &Guard{clock: idem.SystemClock(), retryAfter: DefaultRetryAfter}
	err := &idem.NotRecordedError{Scope: "s", Key: "k", Cause: fmt.Errorf("%w: disk", idem.ErrUnavailable)}
	res := g.refuse("refund", "k", err)
	if !res.IsError || res.Meta[MetaStatus] != StatusOutcomeNotRecorded {
		t.Fatalf("got %+v", res.Meta)
	}
	if _, ok := res.Meta[MetaRetryAfter]; ok {
		t.Fatalf("a retry hint for an effect that may have happened: %+v", res.Meta)
	}
	// The storage errors still mean "did not run".
	res = g.refuse("refund", "k", errors.Join(idem.ErrUnavailable))
	if res.Meta[MetaStatus] != StatusUnavailable {
		t.Fatalf("got %+v", res.Meta)
	}
}

// TestRefuse_RanTwice: an effect whose claim was taken over is answered
// ran_twice with a retry hint (the retry gets the recorded outcome), never
// "unavailable".
func TestRefuse_RanTwice(t *testing.T) {
	g := &Guard{clock: idem.SystemClock(), retryAfter: DefaultRetryAfter}
	err := &idem.RanTwiceError{Scope: "s", Key: "k", Token: 3, Err: &idem.FencedError{Scope: "s", Key: "k", Token: 3}}
	res := g.refuse("refund", "k", err)
	if !res.IsError || res.Meta[MetaStatus] != StatusRanTwice || res.Meta[MetaRetryAfter] != 1 {
		t.Fatalf("got %+v", res.Meta)
	}
}
