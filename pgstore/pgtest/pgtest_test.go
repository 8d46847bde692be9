//go:build unix

package pgtest_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem/pgstore/pgtest"
	"github.com/jackc/pgx/v5"
)

func TestStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgtest.Start(ctx, &pgtest.Options{NoSync: true, Settings: []string{"max_connections=50", "fsync=off"}})
	if errors.Is(err, pgtest.ErrNoBinaries) && os.Getenv("IDEM_REQUIRE_POSTGRES") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			c.Stop()
		}
	}()

	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		t.Fatal(err)
	}
	var maxConns, fsync string
	if err := conn.QueryRow(ctx, "SELECT current_setting('max_connections'), current_setting('fsync')").Scan(&maxConns, &fsync); err != nil {
		t.Fatal(err)
	}
	if maxConns != "50" || fsync != "off" {
		t.Errorf("settings: max_connections=%s fsync=%s, want 50 and off", maxConns, fsync)
	}
	_ = conn.Close(ctx)

	c.Stop()
	stopped = true
	c.Stop() // a second Stop is harmless
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("after Stop, %s: %v, want it removed", c.Dir, err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
	defer ccancel()
	if conn, err := pgx.Connect(cctx, c.URL); err == nil {
		_ = conn.Close(ctx)
		t.Error("the server accepts connections after Stop")
	}
}

func TestCluster_CrashRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgtest.Start(ctx, &pgtest.Options{NoSync: true, Settings: []string{"fsync=off"}})
	if errors.Is(err, pgtest.ErrNoBinaries) && os.Getenv("IDEM_REQUIRE_POSTGRES") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	exec := func(sql string) (int64, error) {
		conn, err := pgx.Connect(ctx, c.URL)
		if err != nil {
			return 0, err
		}
		defer conn.Close(ctx)
		tag, err := conn.Exec(ctx, sql)
		return tag.RowsAffected(), err
	}
	if _, err := exec("CREATE TABLE t (v int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := exec("INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if c.Crash() {
		t.Error("an idle server did not stop on SIGQUIT")
	}
	if _, err := exec("SELECT 1"); err == nil {
		t.Fatal("the server accepts connections after Crash")
	}
	c.Crash() // without a server: nothing
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// What committed before the crash is there after crash recovery.
	n, err := exec("DELETE FROM t WHERE v = 1")
	if err != nil || n != 1 {
		t.Fatalf("after the restart: %d rows, %v; want the committed row", n, err)
	}
}
