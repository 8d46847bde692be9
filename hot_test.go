package idem

import (
	"strconv"
	"testing"
)

func TestHotSet_BoundedBySize(t *testing.T) {
	var h hotSet
	body := make([]byte, 8<<10)
	for i := range 10000 {
		id := []byte("id-" + strconv.Itoa(i))
		h.put(id, &Record{State: StateDone, Result: &Result{Body: body}})
		if h.bytes > hotBytes {
			t.Fatalf("after %d puts the set holds %d bytes, more than %d", i+1, h.bytes, hotBytes)
		}
	}
	if len(h.m) == 0 {
		t.Fatal("nothing kept")
	}
	big := &Record{State: StateDone, Result: &Result{Body: make([]byte, hotMaxBody+1)}}
	h.put([]byte("big"), big)
	if h.get([]byte("big")) != nil {
		t.Fatal("a record with a large body was kept")
	}
	for id := range h.m {
		h.drop([]byte(id))
	}
	if h.bytes != 0 || len(h.m) != 0 {
		t.Fatalf("after dropping everything: %d bytes, %d records", h.bytes, len(h.m))
	}
}

func TestHotSet_DropAndPutAgainDoesNotGrow(t *testing.T) {
	var h hotSet
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
	if len(h.order)-h.head > 2*len(h.m)+1024+1 {
		t.Fatalf("%d ids queued for %d records", len(h.order)-h.head, len(h.m))
	}
}
