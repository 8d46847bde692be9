package idem

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/badgerstore"
)

// kept returns the number of records h keeps and the bytes its shards
// account for.
func kept(h *hotSet) (n, bytes int) {
	for i := range h.shards {
		sh := &h.shards[i]
		n += sh.m.len()
		bytes += sh.bytes
	}
	return n, bytes
}

func TestHotSet_BoundedBySize(t *testing.T) {
	h := newDefaultHotSet()
	body := make([]byte, 8<<10)
	for i := range 10000 {
		h.putRecord("", "id-"+strconv.Itoa(i), &Record{State: StateDone, Result: &Result{Body: body}}, false, time.Time{})
		// Each shard may hold one record beyond the bound.
		if limit := h.limit + hotShards*(hotMaxBody+1024); h.bytes.Load() > limit {
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
	h.putRecord("", "big", big, false, time.Time{})
	if h.get("", "big") != nil {
		t.Fatal("a record with a large body was kept")
	}
	for i := range h.shards {
		for key := range h.shards[i].m.keys {
			h.drop("", key, 0)
		}
		for id := range h.shards[i].m.scoped {
			h.drop(id.scope, id.key, 0)
		}
	}
	if n, _ := kept(h); h.bytes.Load() != 0 || n != 0 {
		t.Fatalf("after dropping everything: %d bytes, %d records", h.bytes.Load(), n)
	}
}

// The bench suite's replay workload keeps 20,000 done keys with ~90-byte
// results: all of them must fit.
func TestHotSet_HoldsReplayWorkload(t *testing.T) {
	h := newDefaultHotSet()
	fp := "idemfp1-sha256:546e759a35dad4c7d310fb03280bbc89af10c154c5f7559c8760fbec3e3f3255"
	body := make([]byte, 94)
	const n = 20_000
	for i := range n {
		key := KeyDeriver{}.Effect("run", strconv.Itoa(i))
		h.putRecord("", key, &Record{Key: key, State: StateDone, Fingerprint: fp,
			Attempts: make([]backend.Attempt, 1), Result: &Result{Status: 200, Body: body}}, false, time.Time{})
	}
	if got, _ := kept(h); got != n {
		t.Fatalf("%d of %d records kept", got, n)
	}
}

func TestHotSet_DropAndPutAgainDoesNotGrow(t *testing.T) {
	h := newDefaultHotSet()
	rec := &Record{State: StateDone, Result: &Result{Body: []byte("x")}}
	for round := range 200 {
		for i := range 100 {
			id := "id-" + strconv.Itoa(i)
			h.putRecord("", id, rec, false, time.Time{})
			if round%2 == 0 {
				h.drop("", id, 0)
			}
		}
	}
	for i := range h.shards {
		sh := &h.shards[i]
		if len(sh.order)-sh.head > 2*sh.m.len()+64+1 {
			t.Fatalf("shard %d: %d ids queued for %d records", i, len(sh.order)-sh.head, sh.m.len())
		}
	}
}

// Entries dropped or replaced before they reach the head of their shard's
// queue are not kept alive by it past a share of the cache: the queue is
// compacted first. The bodies are large so that the bound is on bytes.
func TestHotSet_GoneEntriesBounded(t *testing.T) {
	h := newHotSet(4 << 20)
	body := make([]byte, 8<<10)
	rec := &Record{State: StateDone, Result: &Result{Body: body}}
	const keys = 400 // about 3.3 MiB of entries: the cache holds them all
	for i := range keys {
		h.putRecord("", "id-"+strconv.Itoa(i), rec, false, time.Time{})
	}
	for round := range 50 {
		for i := round % 3; i < keys; i += 3 {
			id := "id-" + strconv.Itoa(i)
			if i%2 == 0 {
				h.drop("", id, 0)
			}
			h.putRecord("", id, rec, false, time.Time{}) // replaces, or puts again
		}
		for i := range h.shards {
			sh := &h.shards[i]
			gone := 0
			for _, q := range sh.order[sh.head:] {
				if q.gone {
					gone += q.size
				}
			}
			if gone != sh.goneBytes {
				t.Fatalf("round %d shard %d: %d bytes of gone entries queued, goneBytes %d", round, i, gone, sh.goneBytes)
			}
			// At most one entry's worth past the bound: the one dropped or
			// replaced since the last check.
			if limit := sh.bytes/goneShare + goneSlack + size(hotID{key: "id-000"}, "", rec.Result); gone > limit {
				t.Fatalf("round %d shard %d: %d bytes of gone entries queued, bound %d", round, i, gone, limit)
			}
		}
	}
	for i := range keys {
		if h.get("", "id-"+strconv.Itoa(i)) == nil {
			t.Fatalf("id-%d lost", i)
		}
	}
}

// Replays counted while flushes take the counts, some on entries dropped
// or replaced meanwhile, all reach a flush, with the latest time.
func TestHotSet_CountLosesNothing(t *testing.T) {
	h := newDefaultHotSet()
	const keys, goroutines, each = 50, 4, 5000
	base := time.Unix(1_700_000_000, 0)
	rec := func(k string) *Record {
		return &Record{Key: k, State: StateDone, Fingerprint: "fp", ExpiresAt: base.Add(time.Hour), Result: &Result{}}
	}
	for i := range keys {
		k := "k" + strconv.Itoa(i)
		h.putRecord("", k, rec(k), false, time.Time{})
	}
	var got []backend.Tally
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				k := "k" + strconv.Itoa((g*each+i)%keys)
				at := base.Add(time.Duration(g*each + i))
				// Dropped by another goroutine: put it back.
				for e, _ := h.replay("", k, "fp", at, 0, nil, true); e == nil; e, _ = h.replay("", k, "fp", at, 0, nil, true) {
					h.putRecord("", k, rec(k), false, time.Time{})
				}
				if i%97 == 0 {
					h.drop("", k, 0)
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
	h := newDefaultHotSet()
	now := time.Unix(1_700_000_000, 0)
	h.putRecord("", "k", &Record{Key: "k", State: StateDone, Fingerprint: "fp", ExpiresAt: now.Add(time.Second), Result: &Result{}}, false, time.Time{})
	if e, _ := h.replay("", "k", "other", now, 0, nil, true); e != nil {
		t.Fatal("replayed for another fingerprint")
	}
	if e, _ := h.replay("", "k", "fp", now.Add(time.Second), 0, nil, true); e != nil {
		t.Fatal("replayed once expired")
	}
	if e, _ := h.replay("", "k", "fp", now, 0, nil, true); e == nil {
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

// A reading of the clock at most behind late never replays an expired
// record: a record with more than behind to live by the reading replays on
// the reading alone; any other is judged on a fresh reading. A reading
// later than that replays a record no longer than the excess past its
// expiry. The replay is counted at the time it was judged at.
func TestHotSet_Replay_LateReading(t *testing.T) {
	expires := time.Unix(1_700_000_000, 0)
	const behind = time.Minute
	offsets := []time.Duration{-2 * behind, -behind - 1, -behind, -behind + 1, -time.Second, -1, 0, 1,
		time.Second, behind / 2, behind, 2 * behind}
	for _, off := range offsets {
		current := expires.Add(off) // the time a fresh reading gives
		for _, late := range []time.Duration{0, 1, time.Second, behind / 2, behind - 1, behind,
			behind + 1, behind + time.Second, 2 * behind} {
			h := newDefaultHotSet()
			h.putRecord("", "k", &Record{Key: "k", State: StateDone, Fingerprint: "fp", ExpiresAt: expires, Result: &Result{}}, false, time.Time{})
			reading := current.Add(-late)
			freshReads := 0
			fresh := func() time.Time {
				freshReads++
				return current
			}
			e, at := h.replay("", "k", "fp", reading, behind, fresh, true)
			name := fmt.Sprintf("%v from expiry, reading %v late", off, late)
			// The bound: late by at most behind, never replayed once
			// expired; later, by no more than the excess.
			if e != nil && !current.Before(expires.Add(max(late-behind, 0))) {
				t.Fatalf("%s: replayed", name)
			}
			if late <= behind && (e != nil) != current.Before(expires) {
				t.Fatalf("%s: replayed %v, want %v", name, e != nil, current.Before(expires))
			}
			// The fresh reading is taken exactly when the late one does not
			// prove the record live, and is then what it is judged on.
			if wantFresh := !reading.Add(behind).Before(expires); (freshReads == 1) != wantFresh || freshReads > 1 {
				t.Fatalf("%s: %d fresh readings, want one: %v", name, freshReads, wantFresh)
			}
			want := reading
			if freshReads == 1 {
				want = current
			}
			if !at.Equal(want) {
				t.Fatalf("%s: judged at %v, want %v", name, at, want)
			}
			got := h.takeCounts(nil)
			if e == nil && len(got) != 0 {
				t.Fatalf("%s: not replayed, but counted: %+v", name, got)
			}
			if e != nil && (len(got) != 1 || got[0].Replays != 1 || !got[0].LastReplay.Equal(at)) {
				t.Fatalf("%s: counts %+v, want one replay at %v", name, got, at)
			}
		}
	}
}

// Records of one key in several scopes are kept apart, and a request
// finds only its own scope's, whatever bytes its scope and key hold.
func TestHotSet_ScopesKeptApart(t *testing.T) {
	h := newDefaultHotSet()
	now := time.Unix(1_700_000_000, 0)
	ids := []hotID{{"", "k"}, {"a", "k"}, {"b", "k"}, {"", "ak"}, {"", "\x01ak"}}
	for i, id := range ids {
		h.putRecord(id.scope, id.key, &Record{Scope: id.scope, Key: id.key, State: StateDone, Fingerprint: "fp",
			ExpiresAt: now.Add(time.Hour), Result: &Result{Status: 200 + i}}, false, time.Time{})
	}
	for i, id := range ids {
		e, _ := h.replay(id.scope, id.key, "fp", now, 0, nil, false)
		if e == nil || e.result.Status != 200+i {
			t.Fatalf("%+v: got %+v, want status %d", id, e, 200+i)
		}
	}
	for _, id := range []hotID{{"a", ""}, {"ak", ""}, {"a\x00", "k"}, {"\x01a", "k"}, {"c", "k"}} {
		if e, _ := h.replay(id.scope, id.key, "fp", now, 0, nil, false); e != nil {
			t.Fatalf("%+v: replayed %+v", id, e.result)
		}
	}
	h.drop("a", "k", 0)
	if h.get("a", "k") != nil || h.get("", "k") == nil || h.get("b", "k") == nil {
		t.Fatal("dropping one scope's record dropped another's, or kept it")
	}
	if n, _ := kept(h); n != len(ids)-1 {
		t.Fatalf("%d records kept, want %d", n, len(ids)-1)
	}
}

// Sweep drops a reclaimed record's entry by token: a newer entry of the
// key stays.
func TestHotSet_DropByToken(t *testing.T) {
	h := newDefaultHotSet()
	h.putRecord("s", "k", &Record{Token: 2, Fingerprint: "fp", Result: &Result{}}, false, time.Time{})
	h.drop("s", "k", 1)
	if h.get("s", "k") == nil {
		t.Fatal("dropped an entry of another token")
	}
	h.drop("s", "k", 2)
	if h.get("s", "k") != nil {
		t.Fatal("kept the entry of the token dropped")
	}
}

// TestHotSet_PutRead_KeepsTheRecordsStrings checks that a record read
// from the backend is kept under its own copies of its scope, key and
// fingerprint (no second copy), and that one naming another key than the
// one asked for is kept under a copy of the key asked for, as put keeps it.
func TestHotSet_PutRead_KeepsTheRecordsStrings(t *testing.T) {
	h := newDefaultHotSet()
	rec := &Record{Scope: "s", Key: strings.Clone("k1"), Fingerprint: strings.Clone("fp"), Result: &Result{}}
	h.putRead("s", "k1", rec, false, time.Time{}) // the first read is not admitted
	h.putRead("s", "k1", rec, false, time.Time{})
	e := h.get("s", "k1")
	if e == nil || unsafe.StringData(e.id.key) != unsafe.StringData(rec.Key) ||
		unsafe.StringData(e.fingerprint) != unsafe.StringData(rec.Fingerprint) {
		t.Fatalf("entry %+v does not keep the record's strings", e)
	}
	other := &Record{Scope: "s", Key: "k3", Fingerprint: "fp", Result: &Result{}}
	key := strings.Clone("k2")
	h.putRead("s", key, other, false, time.Time{})
	h.putRead("s", key, other, false, time.Time{})
	if h.get("s", "k3") != nil {
		t.Fatal("a record naming another key is kept under its own key")
	}
	if e := h.get("s", "k2"); e == nil || unsafe.StringData(e.id.key) == unsafe.StringData(key) {
		t.Fatalf("entry %+v: not kept under a copy of the key asked for", e)
	}
}

// newDefaultHotSet returns the replay cache of a Store with the default
// memory budget.
func newDefaultHotSet() *hotSet {
	s := sharesOf(backend.DefaultMemoryBudget)
	return newHotSet(s.hotBytes)
}

// TestHotSet_ShareOfTheBudget checks the replay cache's share: a fifth of
// the budget from the default up, scaled down with smaller budgets, and
// growing with the budget throughout.
func TestHotSet_ShareOfTheBudget(t *testing.T) {
	for _, c := range []struct{ budget, want int64 }{
		{16 << 20, 16 << 20 / 5 / 4},
		{32 << 20, 32 << 20 / 5 / 2},
		{backend.DefaultMemoryBudget, backend.DefaultMemoryBudget / 5},
		{256 << 20, 256 << 20 / 5},
	} {
		if got := sharesOf(c.budget).hotBytes; got != c.want {
			t.Errorf("budget %d MiB: replay cache share %d, want %d", c.budget>>20, got, c.want)
		}
	}
	prev := int64(0)
	for b := int64(backend.MinMemoryBudget); b <= 2*backend.DefaultMemoryBudget; b += 1 << 20 {
		got := sharesOf(b).hotBytes
		if got < prev {
			t.Fatalf("the share shrinks from %d to %d bytes at a budget of %d MiB", prev, got, b>>20)
		}
		prev = got
	}
}

func TestHotSet_StoreKeepsItsShareOfTheBudget(t *testing.T) {
	const budget = 16 << 20
	b, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	s := New(b, &Options{MemoryBudget: budget, SweepInterval: -1})
	defer s.Close()
	// Below the default budget the fifth is scaled by B/64 MiB.
	if want := int64(budget/5) * budget / backend.DefaultMemoryBudget; s.hot.limit != want {
		t.Fatalf("replay cache bound %d, want the budget's fifth scaled by B/64 MiB, %d", s.hot.limit, want)
	}
	body := make([]byte, 8<<10)
	var peak int64
	// Five times the share in results, each kept when completed.
	for i := range int(5 * s.hot.limit / int64(len(body))) {
		_, _, err := s.Do(context.Background(), Request{Key: "k" + strconv.Itoa(i)},
			func(context.Context) (Result, error) { return Result{Status: 200, Body: body}, nil })
		if err != nil {
			t.Fatal(err)
		}
		peak = max(peak, s.hot.bytes.Load())
	}
	// The bound is exceeded by at most the entry just put (one per shard
	// when puts race; these do not).
	if limit := s.hot.limit + int64(len(body)+1024); peak > limit {
		t.Fatalf("the replay cache held %d bytes, over its share %d", peak, limit)
	}
	if n, _ := kept(s.hot); n == 0 || s.hot.bytes.Load() < s.hot.limit/2 {
		t.Fatalf("the cache keeps %d entries, %d bytes: it should fill its share %d", n, s.hot.bytes.Load(), s.hot.limit)
	}
}

// TestHotSet_CountsOfKeptEntriesWait checks that counting replays of the
// cache's own entries drops nothing and pins nothing, however many entries
// are counted: their counts cost only their places on the pending lists.
// Only entries evicted with unflushed counts (pinned) hold memory beyond the
// cache; past their share, eviction drops the counts (reported, so that the
// Store records the loss) rather than holding more, and a dropped entry is
// held by nothing.
func TestHotSet_CountsOfKeptEntriesWait(t *testing.T) {
	const entries = 20_000
	now := time.Unix(1_700_000_000, 0)
	rec := func(k string) *Record {
		return &Record{Key: k, State: StateDone, Fingerprint: "fp", ExpiresAt: now.Add(time.Hour),
			Result: &Result{Status: 200, Body: make([]byte, 90)}}
	}
	h := newHotSet(int64(entries) * 1024)
	for i := range entries {
		if _, dropped := h.putRecord("", "k"+strconv.Itoa(i), rec("k"+strconv.Itoa(i)), false, time.Time{}); dropped {
			t.Fatalf("put %d dropped counts with nothing counted", i)
		}
	}
	for round := range 3 {
		for i := range entries {
			if e, _ := h.replay("", "k"+strconv.Itoa(i), "fp", now, 0, nil, true); e == nil {
				t.Fatalf("round %d: key %d not replayed from the cache", round, i)
			}
		}
	}
	if p := h.pinned.Load(); p != 0 {
		t.Fatalf("%d bytes pinned with every counted entry still kept", p)
	}
	// Churn: new keys evict the counted ones, which stay pinned until
	// flushed, and count against the limit, up to their share.
	first := -1
	for i := range 4 * entries {
		k := "new" + strconv.Itoa(i)
		if _, dropped := h.putRecord("", k, rec(k), false, time.Time{}); dropped && first < 0 {
			first = i
		}
		if over := h.bytes.Load() + h.pinned.Load() - h.limit; over > hotShards*1024 {
			t.Fatalf("after %d puts the cache and its pinned entries are %d bytes over the limit", i+1, over)
		}
		if p := h.pinned.Load(); p > h.limit/pinnedShare {
			t.Fatalf("after %d puts %d bytes pinned, over the share %d", i+1, p, h.limit/pinnedShare)
		}
	}
	if first < 0 {
		t.Fatalf("the counted entries were evicted (%d bytes pinned) and none was dropped", h.pinned.Load())
	}
	pending := 0
	for i := range h.shards {
		pending += len(h.shards[i].pending)
	}
	var total int64
	seen := map[string]bool{}
	for _, c := range h.takeCounts(nil) {
		total += c.Replays
		seen[c.Key] = true
	}
	if len(seen) == 0 || len(seen) >= entries || total != 3*int64(len(seen)) {
		t.Fatalf("the flush handed over %d replays of %d keys: want 3 a key, some keys dropped", total, len(seen))
	}
	if pending != len(seen) {
		t.Fatalf("%d entries on the pending lists, %d with counts: dropped entries are still held", pending, len(seen))
	}
	if p := h.pinned.Load(); p != 0 {
		t.Fatalf("%d bytes still pinned after the flush", p)
	}
}

// putRecord puts what the cache takes of rec.
func (h *hotSet) putRecord(scope, key string, rec *Record, count bool, at time.Time) (kept, dropped bool) {
	return h.put(scope, key, hotOf(rec), count, at)
}

// TestHotSet_Doorkeeper checks admission on the second read: a record's
// first read from the backend is not kept but its replay is counted, on a
// count-only entry; its second read is kept; a record the Store completed
// (put) is kept at once. Every count reaches takeCounts exactly once.
func TestHotSet_Doorkeeper(t *testing.T) {
	h := newDefaultHotSet()
	at := time.Unix(0, 1234)
	rec := &Record{Scope: "s", Key: "k", Fingerprint: "fp", Token: 7, ExpiresAt: time.Unix(100, 0), Result: &Result{Status: 200}}
	if kept, dropped := h.putRead("s", "k", rec, true, at); !kept || dropped {
		t.Fatalf("first read: kept %v dropped %v, want the count taken", kept, dropped)
	}
	if h.get("s", "k") != nil {
		t.Fatal("a record's first read was admitted")
	}
	if h.pinned.Load() == 0 {
		t.Fatal("the count-only entry is not pinned")
	}
	if kept, _ := h.putRead("s", "k", rec, true, at.Add(1)); !kept || h.get("s", "k") == nil {
		t.Fatal("a record's second read was not admitted")
	}
	h.put("s", "done", hotOf(&Record{Fingerprint: "fp", Token: 3, ExpiresAt: time.Unix(100, 0), Result: &Result{}}), false, time.Time{})
	if h.get("s", "done") == nil {
		t.Fatal("a completed record was not kept at once")
	}
	counts := h.takeCounts(nil)
	var replays int64
	for _, c := range counts {
		if c.Scope != "s" || c.Key != "k" || c.Token != 7 || !c.ExpiresAt.Equal(rec.ExpiresAt) {
			t.Fatalf("tally %+v", c)
		}
		replays += c.Replays
	}
	if replays != 2 || len(counts) != 2 {
		t.Fatalf("tallies %+v: want the two replays in two tallies", counts)
	}
	if h.pinned.Load() != 0 {
		t.Fatalf("%d bytes still pinned after the flush", h.pinned.Load())
	}
	if again := h.takeCounts(nil); len(again) != 0 {
		t.Fatalf("counts taken twice: %+v", again)
	}
}

// TestHotSet_CountOnlyBound checks that count-only entries are bounded by
// the pinned share of the cache's limit: past it a first read's count is
// dropped and reported, and every count a count-only entry took is
// flushed. (A key the doorkeeper admits on a bit another key set is put,
// and its entry may be evicted with its count: each report of a drop is
// at least one count lost.)
func TestHotSet_CountOnlyBound(t *testing.T) {
	h := newHotSet(64 << 10)
	rec := &Record{Fingerprint: "fp", Token: 1, ExpiresAt: time.Unix(100, 0), Result: &Result{}}
	var taken, dropped int64
	for i := range 1000 {
		kept, d := h.putRead("", "key-"+strconv.Itoa(i), rec, true, time.Unix(0, 1))
		if d {
			dropped++
		} else if kept && h.get("", "key-"+strconv.Itoa(i)) == nil {
			taken++
		}
	}
	if dropped == 0 {
		t.Fatal("no count dropped past the pinned share")
	}
	if p := h.pinned.Load(); p > h.limit/pinnedShare {
		t.Fatalf("%d bytes pinned, past the share %d", p, h.limit/pinnedShare)
	}
	var flushed int64
	for _, c := range h.takeCounts(nil) {
		flushed += c.Replays
	}
	if flushed < taken || flushed > 1000-dropped {
		t.Fatalf("%d counts flushed: want at least the %d count-only entries took, at most 1000 less the %d drops",
			flushed, taken, dropped)
	}
}
