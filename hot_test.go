package idem

import (
	"strconv"
	"sync"
	"testing"
	"time"
)

// kept returns the number of records h keeps and the bytes its shards
// account for.
func kept(h *hotSet) (n, bytes int) {
	for i := range h.shards {
		sh := &h.shards[i]
		n += len(sh.m)
		bytes += sh.bytes
	}
	return n, bytes
}

func TestHotSet_BoundedBySize(t *testing.T) {
	h := new(hotSet)
	body := make([]byte, 8<<10)
	for i := range 10000 {
		id := []byte("id-" + strconv.Itoa(i))
		h.put(id, &Record{State: StateDone, Result: &Result{Body: body}})
		// Each shard may hold one record beyond the bound.
		if limit := int64(hotBytes + hotShards*(hotMaxBody+1024)); h.bytes.Load() > limit {
			t.Fatalf("after %d puts the set holds %d bytes, more than %d", i+1, h.bytes.Load(), limit)
		}
	}
	n, bytes := kept(h)
	if n == 0 {
		t.Fatal("nothing kept")
	}
	if int64(bytes) != h.bytes.Load() {
		t.Fatalf("the shards hold %d bytes, the set counts %d", bytes, h.bytes.Load())
	}
	big := &Record{State: StateDone, Result: &Result{Body: make([]byte, hotMaxBody+1)}}
	h.put([]byte("big"), big)
	if h.get([]byte("big")) != nil {
		t.Fatal("a record with a large body was kept")
	}
	for i := range h.shards {
		for id := range h.shards[i].m {
			h.drop([]byte(id))
		}
	}
	if n, _ := kept(h); h.bytes.Load() != 0 || n != 0 {
		t.Fatalf("after dropping everything: %d bytes, %d records", h.bytes.Load(), n)
	}
}

// The bench suite's replay workload keeps 20,000 done keys with ~90-byte
// results: all of them must fit.
func TestHotSet_HoldsReplayWorkload(t *testing.T) {
	h := new(hotSet)
	fp := "idemfp1-sha256:546e759a35dad4c7d310fb03280bbc89af10c154c5f7559c8760fbec3e3f3255"
	body := make([]byte, 94)
	const n = 20_000
	for i := range n {
		key := EffectKey("run", strconv.Itoa(i))
		h.put(recordID("", key), &Record{Key: key, State: StateDone, Fingerprint: fp,
			Attempts: make([]Attempt, 1), Result: &Result{Status: 200, Body: body}})
	}
	if got, _ := kept(h); got != n {
		t.Fatalf("%d of %d records kept", got, n)
	}
}

func TestHotSet_DropAndPutAgainDoesNotGrow(t *testing.T) {
	h := new(hotSet)
	rec := &Record{State: StateDone, Result: &Result{Body: []byte("x")}}
	for round := range 200 {
		for i := range 100 {
			id := []byte("id-" + strconv.Itoa(i))
			h.put(id, rec)
			if round%2 == 0 {
				h.drop(id)
			}
		}
	}
	for i := range h.shards {
		sh := &h.shards[i]
		if len(sh.order)-sh.head > 2*len(sh.m)+64+1 {
			t.Fatalf("shard %d: %d ids queued for %d records", i, len(sh.order)-sh.head, len(sh.m))
		}
	}
}

// Replays counted while flushes take the counts, some on entries dropped
// or replaced meanwhile, all reach a flush, with the latest time.
func TestHotSet_CountLosesNothing(t *testing.T) {
	h := new(hotSet)
	const keys, goroutines, each = 50, 4, 5000
	base := time.Unix(1_700_000_000, 0)
	rec := func(k string) *Record {
		return &Record{Key: k, State: StateDone, Fingerprint: "fp", ExpiresAt: base.Add(time.Hour), Result: &Result{}}
	}
	for i := range keys {
		k := "k" + strconv.Itoa(i)
		h.put(recordID("", k), rec(k))
	}
	var got []Tally
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				k := "k" + strconv.Itoa((g*each+i)%keys)
				id := recordID("", k)
				// Dropped by another goroutine: put it back.
				for e, _ := h.replay(id, "fp", base.Add(time.Duration(g*each+i)), true); e == nil; e, _ = h.replay(id, "fp", base.Add(time.Duration(g*each+i)), true) {
					h.put(id, rec(k))
				}
				if i%97 == 0 {
					h.drop(id)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	for flushing := true; flushing; {
		select {
		case <-done:
			flushing = false
		default:
		}
		got = h.takeCounts(got)
	}
	var total int64
	var last time.Time
	for _, c := range got {
		total += c.Replays
		if c.LastReplay.After(last) {
			last = c.LastReplay
		}
	}
	if total != goroutines*each {
		t.Fatalf("%d replays flushed, %d counted", total, goroutines*each)
	}
	if want := base.Add(goroutines*each - 1); !last.Equal(want) {
		t.Fatalf("latest replay %v, want %v", last, want)
	}
}

// A replay is refused, and not counted, for another fingerprint or once
// the record has expired.
func TestHotSet_ReplayChecksFingerprintAndExpiry(t *testing.T) {
	h := new(hotSet)
	now := time.Unix(1_700_000_000, 0)
	id := recordID("", "k")
	h.put(id, &Record{Key: "k", State: StateDone, Fingerprint: "fp", ExpiresAt: now.Add(time.Second), Result: &Result{}})
	if e, _ := h.replay(id, "other", now, true); e != nil {
		t.Fatal("replayed for another fingerprint")
	}
	if e, _ := h.replay(id, "fp", now.Add(time.Second), true); e != nil {
		t.Fatal("replayed once expired")
	}
	if e, _ := h.replay(id, "fp", now, true); e == nil {
		t.Fatal("not replayed")
	}
	got := h.takeCounts(nil)
	if len(got) != 1 || got[0].Key != "k" || got[0].Replays != 1 || !got[0].LastReplay.Equal(now) {
		t.Fatalf("counts %+v, want one replay of k at %v", got, now)
	}
	if got := h.takeCounts(nil); len(got) != 0 {
		t.Fatalf("counts taken twice: %+v", got)
	}
}
