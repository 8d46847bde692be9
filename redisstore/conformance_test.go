package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/redisstore/redistest"
)

// TestConformance runs the whole conformance suite against redis-server
// with appendfsync always: every backend a test asks for gets a prefix of
// its own.
func TestConformance(t *testing.T) {
	c := client(t)
	idemtest.TestBackend(t, func(t testing.TB) backend.Backend {
		return newBackend(t, c, nil)
	})
}

// TestConformance_Encrypted runs the suite with a keyring: the Store seals
// every result before redisstore sees it, and Store.Rekey reseals them.
func TestConformance_Encrypted(t *testing.T) {
	c := client(t)
	idemtest.TestBackendEncrypted(t, func(t testing.TB) backend.Backend {
		return newBackend(t, c, nil)
	})
}

// TestConformance_Cluster runs the suite on a Redis Cluster of three
// primaries through a Cluster client: every script touches keys of one
// slot (a shard's hash tag), and Stale, Reclaim and Scan reach every node.
func TestConformance_Cluster(t *testing.T) {
	needServer(t)
	cl, err := redistest.StartCluster(ctx, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	c := cl.Client()
	defer c.Close()
	idemtest.TestBackend(t, func(t testing.TB) backend.Backend {
		return newBackend(t, c, nil)
	})
	// Scan (the command line's ls and export) walks every node, and the
	// shards spread the records over the nodes.
	b := newBackend(t, c, nil)
	now := time.Now()
	for i := range 64 {
		if _, _, err := b.Claim(ctx, "s", fmt.Sprintf("k-%d", i), claimArgs(now)); err != nil {
			t.Fatal(err)
		}
	}
	seen := 0
	if err := b.Scan(ctx, func(r *backend.Record) bool { seen++; return true }); err != nil {
		t.Fatal(err)
	}
	if seen != 64 {
		t.Fatalf("Scan saw %d records of 64", seen)
	}
	holding := 0
	for _, n := range cl.Nodes {
		nc := n.Client()
		keys, err := nc.Keys(ctx, "{"+b.Prefix()+":*").Result()
		_ = nc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			holding++
		}
	}
	if holding < 2 {
		t.Fatalf("the records sit on %d of %d nodes", holding, len(cl.Nodes))
	}
}
