package redisstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/redisstore"
	"github.com/idemkit/idem/redisstore/redistest"
)

// startServer starts a server of its own with settings, stopped when tb
// ends.
func startServer(tb testing.TB, settings ...string) *redistest.Server {
	tb.Helper()
	needServer(tb)
	s, err := redistest.Start(ctx, &redistest.Options{Settings: settings})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

func TestNew_Durable_RefusesServersThatCannotKeepIt(t *testing.T) {
	for _, tc := range []struct {
		settings []string
		names    string
	}{
		{[]string{"appendonly no"}, "appendonly no"},
		{[]string{"appendfsync everysec"}, "appendfsync everysec"},
		{[]string{"appendfsync no"}, "appendfsync no"},
		{[]string{"maxmemory-policy volatile-lru"}, "maxmemory-policy volatile-lru"},
	} {
		t.Run(tc.names, func(t *testing.T) {
			s := startServer(t, tc.settings...)
			_, err := redisstore.Open(ctx, s.URL(), nil)
			if !errors.Is(err, redisstore.ErrNotDurable) {
				t.Fatalf("Open = %v, want ErrNotDurable", err)
			}
			if !strings.Contains(err.Error(), tc.names) {
				t.Fatalf("the error %q does not name %q", err, tc.names)
			}
			b, err := redisstore.Open(ctx, s.URL(), &redisstore.Options{Durability: backend.Fast})
			if err != nil {
				t.Fatalf("Fast refused: %v", err)
			}
			_ = b.Close()
		})
	}
}

func TestNew_Durable_AppendfsyncAlways(t *testing.T) {
	b, err := redisstore.Open(ctx, needServer(t).URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNew_Unreachable(t *testing.T) {
	_, err := redisstore.Open(ctx, "redis://127.0.0.1:1/0", nil)
	if !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("Open = %v, want ErrUnavailable", err)
	}
}

func TestNew_Replicas_NoReplicaFailsTheWrite(t *testing.T) {
	c := client(t)
	b := newBackend(t, c, &redisstore.Options{Replicas: 1, ReplicaTimeout: 50 * time.Millisecond})
	_, _, err := b.Claim(ctx, "s", "k", backend.ClaimArgs{Fingerprint: "fp", Now: time.Now(), LeaseEnds: time.Now().Add(time.Minute)})
	if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "0 of 1 replicas") {
		t.Fatalf("Claim = %v, want unavailable: 0 of 1 replicas", err)
	}
}

func TestNew_Replicas_AcknowledgedByAReplica(t *testing.T) {
	primary := startServer(t, "repl-diskless-sync-delay 0")
	_, port, _ := strings.Cut(primary.Addr, ":")
	replica := startServer(t, "replicaof 127.0.0.1 "+port)
	pc := primary.Client()
	defer pc.Close()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(pc.Info(ctx, "replication").Val(), "connected_slaves:1") {
		if time.Now().After(deadline) {
			t.Fatal("the replica did not connect")
		}
		time.Sleep(20 * time.Millisecond)
	}
	b := newBackend(t, pc, &redisstore.Options{Replicas: 1, ReplicaTimeout: 5 * time.Second})
	now := time.Now()
	rec, claimed, err := b.Claim(ctx, "s", "k", backend.ClaimArgs{Fingerprint: "fp", Now: now, LeaseEnds: now.Add(time.Minute)})
	if err != nil || !claimed {
		t.Fatalf("Claim = %v, %v", claimed, err)
	}
	if err := b.Complete(ctx, "s", "k", rec.Token, backend.Completion{Result: backend.Result{Status: 200}, At: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// What WAIT acknowledged is on the replica.
	rb, err := redisstore.Open(ctx, replica.URL(), &redisstore.Options{Prefix: b.Prefix(), Durability: backend.Fast})
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	got, err := rb.Get(ctx, "s", "k")
	if err != nil || got.State != backend.StateDone {
		t.Fatalf("the replica has %v, %v", got, err)
	}
}

func TestBackend_Maintain_RefusesClaimsWhileTheServerIsNotDurable(t *testing.T) {
	s := startServer(t)
	c := s.Client()
	defer c.Close()
	b := newBackend(t, c, nil)
	now := time.Now()
	args := backend.ClaimArgs{Fingerprint: "fp", Now: now, LeaseEnds: now.Add(time.Minute)}
	open, _, err := b.Claim(ctx, "s", "open", args)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "appendfsync", "everysec").Err(); err != nil {
		t.Fatal(err)
	}
	err = b.Maintain(ctx)
	if !errors.Is(err, redisstore.ErrNotDurable) || !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "appendfsync everysec") {
		t.Fatalf("Maintain = %v", err)
	}
	if _, _, err := b.Claim(ctx, "s", "k", args); !errors.Is(err, redisstore.ErrNotDurable) || !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("Claim on a server that is not durable = %v", err)
	}
	// A claim already made may still end.
	if err := b.Release(ctx, "s", "open", open.Token, backend.Releasing{At: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "appendfsync", "always").Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Maintain(ctx); err != nil {
		t.Fatal(err)
	}
	if _, claimed, err := b.Claim(ctx, "s", "k", args); err != nil || !claimed {
		t.Fatalf("Claim after the setting is restored = %v, %v", claimed, err)
	}
}

func TestNew_RefusesAnotherLayout(t *testing.T) {
	c := client(t)
	b := newBackend(t, c, nil)
	if err := c.Set(ctx, b.Prefix()+":layout", redisstore.Layout+1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := redisstore.New(ctx, c, &redisstore.Options{Prefix: b.Prefix()})
	if !errors.Is(err, redisstore.ErrLayout) {
		t.Fatalf("New = %v, want ErrLayout", err)
	}
}
