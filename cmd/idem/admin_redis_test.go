package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/redisstore"
	"github.com/idemkit/idem/redisstore/redistest"
)

// TestAdmin_RedisURL runs the commands that read a store against a
// redis:// URL: records a Store wrote on the server are listed, told,
// counted and exported.
func TestAdmin_RedisURL(t *testing.T) {
	ctx := context.Background()
	srv, err := redistest.Start(ctx, nil)
	if errors.Is(err, redistest.ErrNoBinary) && !requireRedis() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	b, err := redisstore.Open(ctx, srv.URL(), &redisstore.Options{Prefix: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	store := idem.New(b, &idem.Options{Retention: time.Hour})
	for _, k := range []string{"refund:order-1", "refund:order-2"} {
		if _, _, err := store.Do(ctx, idem.Request{Scope: "tenant", Key: k, Fingerprint: "fp"},
			func(context.Context) (idem.Result, error) {
				return idem.Result{Status: 201, Body: []byte("ok " + k)}, nil
			}); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	url := srv.URL() + "?prefix=shop"

	out := mustRun(t, "ls", url)
	for _, k := range []string{"refund:order-1", "refund:order-2"} {
		if !strings.Contains(out, k) {
			t.Errorf("ls lacks %s:\n%s", k, out)
		}
	}
	if out := mustRun(t, "inspect", url, "-scope", "tenant", "refund:order-2"); !strings.Contains(out, "201") {
		t.Errorf("inspect:\n%s", out)
	}
	if out := mustRun(t, "stats", url, "-json"); !strings.Contains(out, `"done": 2`) {
		t.Errorf("stats:\n%s", out)
	}
	if out := mustRun(t, "export", url); strings.Count(out, "\n") != 2 || !strings.Contains(out, "refund:order-1") {
		t.Errorf("export:\n%s", out)
	}
	// Another prefix is another store.
	if out := mustRun(t, "ls", srv.URL()); strings.Contains(out, "refund:order-1") {
		t.Errorf("ls of the default prefix shows the shop's records:\n%s", out)
	}
}

// requireRedis reports whether IDEM_REQUIRE_REDIS=1 asks tests to fail
// rather than skip without redis-server.
func requireRedis() bool { return os.Getenv("IDEM_REQUIRE_REDIS") == "1" }
