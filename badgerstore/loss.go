package badgerstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/internal/badger"
	"github.com/idemkit/idem/internal/engine"
)

// LossWindow is the time after an accepted loss (Options.AcceptLoss)
// during which a claim on an absent key does not run blindly: the store
// cannot tell which keys the lost tables or logs held, so every absent key
// may be one of them, and its claim first goes to the Resolver (see
// Options.AcceptLoss for what each answer does). So does a claim
// over a released or expired record last claimed before Start: the retry
// that followed may be what was lost. Done and in-progress records, and
// records claimed since Start, are not affected.
type LossWindow struct {
	// Start is when the store opened the window (its Clock), after the
	// latest loss accepted: the writes lost were made before it.
	Start time.Time `json:"start"`
	// End is when the window ends by itself: Start plus
	// Options.LossWindow, or the Retention when that is zero. A key
	// lost has expired by then, as its record would have.
	End time.Time `json:"end"`
	// Lost says what the opens that accepted the loss found missing, one
	// finding a line.
	Lost string `json:"lost"`
}

// lossKey holds the loss window in force, as JSON; the window is kept
// after it ends, until EndLossWindow or the next accepted loss.
var lossKey = []byte("s/loss")

// lossTokenGap is how far the fencing token counter jumps when a loss
// window opens: the claims lost may have handed out tokens above the
// counter Badger kept, and a token must never repeat (a downstream that
// refuses older tokens would refuse the new claims, or take a repeat for
// the same claim).
const lossTokenGap = 1 << 32

// loadLoss reads, on open, the loss window in force and what the engine
// accepted as lost without a window yet.
func (b *Backend) loadLoss() error {
	return b.eng.View(func(txn *badger.Txn) error {
		if item, err := txn.Get(lossKey); err == nil {
			var w LossWindow
			err = item.Value(func(v []byte) error { return json.Unmarshal(v, &w) })
			if err != nil {
				return fmt.Errorf("%w: loss window: %w", backend.ErrCorrupt, err)
			}
			b.loss.Store(&w)
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		item, err := txn.Get([]byte(engine.LossKey))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		b.lossPending = string(v)
		return err
	})
}

// openLossWindow opens a loss window at now if an open accepted a loss
// that has none yet, lasting Options.LossWindow or else retention;
// a window still in force is extended. The window covers this process at
// once; it is made durable, with the engine's record of the loss deleted
// and the token counter moved past every token the lost claims may have
// held, in one write. If that write fails, the next open opens the window
// again. It reports the window and whether it opened one.
func (b *Backend) openLossWindow(now time.Time, retention time.Duration) (LossWindow, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lossPending == "" || b.ro {
		return LossWindow{}, false, nil
	}
	length := b.lossLength
	if length <= 0 {
		length = retention
	}
	w := LossWindow{Start: now, End: now.Add(length), Lost: b.lossPending}
	if old := b.loss.Load(); old != nil && now.Before(old.End) {
		w.End = maxTime(old.End, w.End)
		w.Lost = old.Lost + "\n" + w.Lost
	}
	b.loss.Store(&w)
	b.logger.logger().Warn("idem: loss window open: a claim on an absent key asks the Resolver first",
		"start", w.Start, "end", w.End, "lost", strings.ReplaceAll(w.Lost, "\n", "; "))
	raw, err := json.Marshal(w)
	if err != nil {
		return w, true, err
	}
	err = b.update(func(t *engine.Txn) error {
		t.Set(lossKey, raw, 0)
		t.Delete([]byte(engine.LossKey))
		b.lastToken += lossTokenGap
		t.Set(tokenKey, binary.BigEndian.AppendUint64(nil, b.lastToken), 0)
		return nil
	})
	if err != nil {
		return w, true, backend.Unavailable("loss window", err)
	}
	b.lossPending = ""
	return w, true, nil
}

// OpenLossWindow implements backend.LossKeeper: it opens the loss window
// of an open that accepted a loss (Options.AcceptLoss), lasting
// Options.LossWindow or else length.
func (b *Backend) OpenLossWindow(now time.Time, length time.Duration) error {
	_, _, err := b.openLossWindow(now, length)
	return err
}

var _ backend.LossKeeper = (*Backend)(nil)

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// LossWindow returns the loss window kept in the store, if any: in force
// while the store's clock is before its End.
func (b *Backend) LossWindow() (LossWindow, bool) {
	if w := b.loss.Load(); w != nil {
		return *w, true
	}
	return LossWindow{}, false
}

// EndLossWindow ends the loss window now, for an operator who has settled
// the keys lost or knows which they were: from then on a claim on an
// absent key runs at once. Claims held during the window stay held until
// the Resolver or Settle ends them.
func (b *Backend) EndLossWindow(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := b.update(func(t *engine.Txn) error {
		t.Delete(lossKey)
		t.Delete([]byte(engine.LossKey))
		return nil
	})
	if err != nil {
		return backend.Unavailable("end loss window", err)
	}
	b.mu.Lock()
	b.loss.Store(nil)
	b.lossPending = ""
	b.mu.Unlock()
	return nil
}

// lossNoteFor is the note of a claim at now over rec: nil when nothing
// is stored, else a released or expired record. Inside a loss window it
// is the loss note when nothing is stored, or when rec was last claimed
// before the latest loss was accepted: a later write to it (the claim
// and completion of a retry) may be what was lost. Otherwise none. It
// runs on the committer.
func (b *Backend) lossNoteFor(rec *backend.Record, now time.Time) string {
	w := b.loss.Load()
	if w == nil || !now.Before(w.End) {
		return ""
	}
	if rec == nil || rec.ClaimedAt.Before(w.Start) {
		return backend.LossNote
	}
	return ""
}
