package main

import (
	"fmt"
	"sync"
)

// ledger is the demo's payment provider: it executes every refund it is
// asked for and does not dedupe, as many downstream systems don't. It
// outlives the tool server, so recovery can ask it what happened.
//
// gen fences a crashed server: a server instance refunds only while its
// generation is the current one, as a killed process cannot act after it
// died. Without it the handlers still running in this process after a
// simulated crash would act like ghosts.
type ledger struct {
	mu      sync.Mutex // guards everything below
	gen     int
	seq     int
	byOrder map[string][]refund
	byKey   map[string]refund // scope + "\x00" + key -> the refund it made
}

// refund is one executed refund.
type refund struct {
	ID     string `json:"id"`
	Order  string `json:"order"`
	Amount string `json:"amount"`
	// Key is the Idempotency-Key the request carried, if any; the ledger
	// keeps it as metadata, like a provider's reference field.
	Key string `json:"-"`
}

func newLedger() *ledger {
	return &ledger{byOrder: map[string][]refund{}, byKey: map[string]refund{}}
}

// generation returns the current server generation.
func (l *ledger) generation() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen
}

// kill ends the current generation: its server no longer acts.
func (l *ledger) kill() {
	l.mu.Lock()
	l.gen++
	l.mu.Unlock()
}

// refund executes a refund for a server of generation gen, and reports
// false if that server is dead.
func (l *ledger) refund(gen int, scope, key, order, amount string) (refund, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if gen != l.gen {
		return refund{}, false
	}
	l.seq++
	r := refund{ID: fmt.Sprintf("re_%05d", l.seq), Order: order, Amount: amount, Key: key}
	l.byOrder[order] = append(l.byOrder[order], r)
	if key != "" {
		l.byKey[scope+"\x00"+key] = r
	}
	return r, true
}

// lookup returns the refund made under (scope, key), if any.
func (l *ledger) lookup(scope, key string) (refund, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.byKey[scope+"\x00"+key]
	return r, ok
}

// executed reports whether order has been refunded at least once.
func (l *ledger) executed(order string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byOrder[order]) > 0
}

// tally counts executions against the intended refunds (order -> amount).
type tally struct {
	// Executed counts refunds made; Duplicates the ones beyond the first
	// per intended refund; WrongAmount the ones with another amount than
	// planned; Missing the intended refunds never made; Multiple the
	// intended refunds made more than once.
	Executed, Duplicates, WrongAmount, Missing, Multiple int
}

func (l *ledger) tally(intended map[string]string) tally {
	l.mu.Lock()
	defer l.mu.Unlock()
	var t tally
	for order, amount := range intended {
		rs := l.byOrder[order]
		t.Executed += len(rs)
		switch {
		case len(rs) == 0:
			t.Missing++
		case len(rs) > 1:
			t.Multiple++
			t.Duplicates += len(rs) - 1
		}
		for _, r := range rs {
			if r.Amount != amount {
				t.WrongAmount++
			}
		}
	}
	return t
}
