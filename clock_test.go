package idem

import (
	"context"
	"testing"
	"time"
)

// With the system clock, a replay is judged on the latest reading of the
// clock, taken in the background: a reading less than coarseSlack late
// still replays a live record and never an expired one. (The background
// refresh may replace the reading set here with a fresher one meanwhile,
// which the same holds for.)
func TestStore_Replay_LateReading(t *testing.T) {
	s, err := memStore(&Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.wall == nil || s.hot == nil {
		t.Fatal("the store does not read the system clock through its latest reading")
	}
	ctx := context.Background()
	run := func(context.Context) (Result, error) { return Result{Status: 200}, nil }
	long := Request{Key: "long", Fingerprint: "fp"}
	short := Request{Key: "short", Fingerprint: "fp", Retention: time.Nanosecond}
	if _, _, err := s.Do(ctx, long, run); err != nil {
		t.Fatal(err)
	}
	for _, late := range []time.Duration{0, time.Millisecond, time.Second, coarseSlack / 2, coarseSlack - time.Millisecond} {
		// Completed with a nanosecond to live: expired by the time it is
		// asked for again, which it is just after it was put in the set.
		if _, replayed, err := s.Do(ctx, short, run); err != nil || replayed {
			t.Fatalf("%v late: the expired record: replayed %v, %v", late, replayed, err)
		}
		reading := time.Now().Add(-late)
		s.wall.base.Store(&reading)
		if _, res, err := s.Begin(ctx, long); err != nil || res == nil {
			t.Fatalf("%v late: the live record was not replayed: %v", late, err)
		}
		c, res, err := s.Begin(ctx, short)
		if err != nil || res != nil || c == nil {
			t.Fatalf("%v late: the expired record: claim %v, replay %v, %v", late, c, res, err)
		}
		if err := c.Release(ctx, "test"); err != nil {
			t.Fatal(err)
		}
	}
}
