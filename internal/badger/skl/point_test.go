//go:build upstream

/*
 * SPDX-FileCopyrightText: © 2017-2025 Istari Digital, Inc.
 * SPDX-License-Identifier: Apache-2.0
 */

package skl

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/idemkit/idem/internal/badger/y"
)

func userKey(i int) []byte { return []byte(fmt.Sprintf("user-key-%08d", i)) }

func valueOf(i int, version uint64) y.ValueStruct {
	v := make([]byte, 16)
	binary.BigEndian.PutUint64(v, uint64(i))
	binary.BigEndian.PutUint64(v[8:], version)
	return y.ValueStruct{Value: v, Meta: 1}
}

// checkList walks the list's base level and checks it holds exactly the
// keys of want, in order, with their values.
func checkList(t *testing.T, s *Skiplist, want map[string]y.ValueStruct) {
	t.Helper()
	it := s.NewIterator()
	defer it.Close()
	var last []byte
	n := 0
	for it.SeekToFirst(); it.Valid(); it.Next() {
		k := it.Key()
		if last != nil && y.CompareKeys(last, k) >= 0 {
			t.Fatalf("keys out of order: %q then %q", last, k)
		}
		last = append(last[:0], k...)
		w, ok := want[string(k)]
		if !ok {
			t.Fatalf("unexpected key %q", k)
		}
		if got := it.Value(); !bytes.Equal(got.Value, w.Value) {
			t.Fatalf("key %q: value %x, want %x", k, got.Value, w.Value)
		}
		n++
	}
	if n != len(want) {
		t.Fatalf("list holds %d keys, want %d", n, len(want))
	}
}

// Versions of the same keys put by several writers at once, in random
// order, with readers alongside: the hinted path and the descent from the
// head leave the same list.
func TestPut_VersionsConcurrent(t *testing.T) {
	const keys, versions, writers = 3000, 4, 4
	s := NewSkiplist(64 << 20)
	defer s.DecrRef()
	type put struct {
		i       int
		version uint64
	}
	var puts []put
	for i := range keys {
		for v := 1; v <= versions; v++ {
			puts = append(puts, put{i, uint64(v)})
		}
	}
	rand.Shuffle(len(puts), func(a, b int) { puts[a], puts[b] = puts[b], puts[a] })
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := w; j < len(puts); j += writers {
				p := puts[j]
				s.Put(y.KeyWithTs(userKey(p.i), p.version), valueOf(p.i, p.version))
			}
		}()
	}
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			i := rand.IntN(keys)
			vs := s.Get(y.KeyWithTs(userKey(i), versions))
			if vs.Value != nil && binary.BigEndian.Uint64(vs.Value) != uint64(i) {
				t.Errorf("Get of key %d read key %d's value", i, binary.BigEndian.Uint64(vs.Value))
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	readers.Wait()
	want := map[string]y.ValueStruct{}
	for _, p := range puts {
		want[string(y.KeyWithTs(userKey(p.i), p.version))] = valueOf(p.i, p.version)
	}
	checkList(t, s, want)
	for i := range keys {
		vs := s.Get(y.KeyWithTs(userKey(i), versions))
		if vs.Version != versions || binary.BigEndian.Uint64(vs.Value[8:]) != versions {
			t.Fatalf("key %d: Get read version %d", i, vs.Version)
		}
		vs = s.Get(y.KeyWithTs(userKey(i), 2))
		if vs.Version != 2 {
			t.Fatalf("key %d at 2: Get read version %d", i, vs.Version)
		}
	}
}

// The next version of a key just put is placed from its hint, at each
// level of a node up to hintLevels tall.
func TestPut_NextVersionUsesHint(t *testing.T) {
	s := NewSkiplist(16 << 20)
	defer s.DecrRef()
	for i := range 5000 {
		s.Put(y.KeyWithTs(userKey(i), 1), valueOf(i, 1))
	}
	// The hint table is direct-mapped: a key's hint is there while few
	// keys were put after it, as between a value and its update.
	for i := 10000; i < 15000; i += 7 {
		s.Put(y.KeyWithTs(userKey(i), 1), valueOf(i, 1))
		key := y.KeyWithTs(userKey(i), 2)
		for height := 1; height <= hintLevels; height++ {
			var prev, next [maxHeight + 1]*node
			found, ok := s.spliceFromHint(key, userHash(key), height, &prev, &next)
			if !ok || found != nil {
				t.Fatalf("key %d, height %d: no splice from the hint (ok %v)", i, height, ok)
			}
			if !y.SameKey(next[0].key(s.arena), key) {
				t.Fatalf("key %d: the next node at the base level is not the key's version 1", i)
			}
			for l := 0; l < height; l++ {
				if prev[l] != s.head && y.CompareKeys(prev[l].key(s.arena), key) >= 0 {
					t.Fatalf("key %d level %d: predecessor %q not before the key", i, l, prev[l].key(s.arena))
				}
				if next[l] != nil && y.CompareKeys(key, next[l].key(s.arena)) >= 0 {
					t.Fatalf("key %d level %d: successor %q not after the key", i, l, next[l].key(s.arena))
				}
			}
		}
		if _, ok := s.spliceFromHint(key, userHash(key), hintLevels+1, new([maxHeight + 1]*node),
			new([maxHeight + 1]*node)); ok {
			t.Fatalf("a splice from the hint for a node taller than the hint")
		}
		s.Put(key, valueOf(i, 2))
		// A version put again is set in place, found from the hint.
		var prev, next [maxHeight + 1]*node
		if found, ok := s.spliceFromHint(key, userHash(key), 1, &prev, &next); !ok || found == nil {
			t.Fatalf("key %d: the version just put is not found from the hint", i)
		}
	}
	want := map[string]y.ValueStruct{}
	for i := range 5000 {
		want[string(y.KeyWithTs(userKey(i), 1))] = valueOf(i, 1)
	}
	for i := 10000; i < 15000; i += 7 {
		want[string(y.KeyWithTs(userKey(i), 1))] = valueOf(i, 1)
		want[string(y.KeyWithTs(userKey(i), 2))] = valueOf(i, 2)
	}
	checkList(t, s, want)
}

// A hint that is wrong (a start after the key, or a start far before it)
// is not followed: the key goes where the descent from the head puts it.
func TestPut_WrongHintFallsBack(t *testing.T) {
	s := NewSkiplist(16 << 20)
	defer s.DecrRef()
	for i := range 2000 {
		s.Put(y.KeyWithTs(userKey(i), 1), valueOf(i, 1))
	}
	want := map[string]y.ValueStruct{}
	for i := range 2000 {
		want[string(y.KeyWithTs(userKey(i), 1))] = valueOf(i, 1)
	}
	late := s.arena.getNodeOffset(s.findLast())
	first := s.arena.getNodeOffset(s.getNext(s.head, 0))
	for i := 100; i < 2000; i += 100 {
		key := y.KeyWithTs(userKey(i), 2)
		h := userHash(key)
		sl, _ := s.hintFor(h)
		start := late // after the key
		if i%200 == 0 {
			start = first // before it, but more than hintSteps away
		}
		for l := range sl.prev {
			sl.prev[l].Store(start)
		}
		var prev, next [maxHeight + 1]*node
		if _, ok := s.spliceFromHint(key, h, 1, &prev, &next); ok {
			t.Fatalf("key %d: a splice from a wrong hint", i)
		}
		s.Put(key, valueOf(i, 2))
		want[string(key)] = valueOf(i, 2)
	}
	checkList(t, s, want)
}

// The filter never hides a key put, and turns away most keys never put.
func TestGet_Filter(t *testing.T) {
	s := NewSkiplist(8 << 20)
	defer s.DecrRef()
	const n = 20000
	for i := range n {
		s.Put(y.KeyWithTs(userKey(i), 5), valueOf(i, 5))
	}
	for i := range n {
		if vs := s.Get(y.KeyWithTs(userKey(i), 9)); vs.Version != 5 {
			t.Fatalf("key %d: Get read version %d", i, vs.Version)
		}
	}
	passed := 0
	for i := n; i < 2*n; i++ {
		key := y.KeyWithTs(userKey(i), 9)
		if s.mayHold(userHash(key)) {
			passed++
		}
		if vs := s.Get(key); vs.Value != nil || vs.Meta != 0 {
			t.Fatalf("key %d never put: Get read %v", i, vs)
		}
	}
	// 8 MiB of arena: 8,192 words of filter for 20,000 keys, 26 bits a
	// key, three bits in one word: about 1% pass.
	if passed > n/20 {
		t.Fatalf("%d of %d keys never put passed the filter", passed, n)
	}
}

// A pooled skiplist's filter and hints start empty: nothing of the last
// skiplist's keys passes or guides a put.
func TestPool_SideStartsEmpty(t *testing.T) {
	var pool ArenaPool
	const size = 4 << 20
	first := NewSkiplistPooled(size, &pool)
	for i := range 5000 {
		first.Put(y.KeyWithTs(userKey(i), 1), valueOf(i, 1))
	}
	first.DecrRef()
	second := NewSkiplistPooled(size, &pool)
	defer second.DecrRef()
	for i := range second.side.hints {
		if second.side.hints[i].tag.Load() != 0 {
			t.Fatalf("hint slot %d kept from the last skiplist", i)
		}
	}
	for i := range second.side.filter {
		if second.side.filter[i].Load() != 0 {
			t.Fatalf("filter word %d kept from the last skiplist", i)
		}
	}
	for i := 0; i < 5000; i += 10 {
		key := y.KeyWithTs(userKey(i), 2)
		if vs := second.Get(key); vs.Value != nil {
			t.Fatalf("key %d of the last skiplist read", i)
		}
		second.Put(key, valueOf(i, 2))
	}
	want := map[string]y.ValueStruct{}
	for i := 0; i < 5000; i += 10 {
		want[string(y.KeyWithTs(userKey(i), 2))] = valueOf(i, 2)
	}
	checkList(t, second, want)
}
