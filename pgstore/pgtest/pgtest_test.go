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

func TestCluster_StartStandby_KillPromote(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, err := pgtest.Start(ctx, &pgtest.Options{NoSync: true,
		Settings: []string{"fsync=off", "synchronous_standby_names=standby"}})
	if errors.Is(err, pgtest.ErrNoBinaries) && os.Getenv("IDEM_REQUIRE_POSTGRES") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Stop()
	standby, err := primary.StartStandby(ctx, &pgtest.Options{NoSync: true, Settings: []string{"fsync=off"}})
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Stop()
	exec := func(url, sql string) (int64, error) {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return 0, err
		}
		defer conn.Close(ctx)
		tag, err := conn.Exec(ctx, sql)
		return tag.RowsAffected(), err
	}
	// The primary waits for its synchronous standby: the commit returns
	// once the standby has the row.
	if _, err := exec(primary.URL, "CREATE TABLE t (v int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := exec(primary.URL, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if _, err := exec(standby.URL, "INSERT INTO t VALUES (2)"); err == nil {
		t.Fatal("a standby accepted a write")
	}
	primary.Kill()
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := exec(standby.URL, "DELETE FROM t WHERE v = 1")
	if err != nil || n != 1 {
		t.Fatalf("after the promotion: %d rows, %v; want the row the primary acknowledged", n, err)
	}
	// A multi-host URL finds the server that accepts writes.
	url := "postgres://postgres@" + primary.Addr + "," + standby.Addr + "/postgres?sslmode=disable&target_session_attrs=read-write"
	if _, err := exec(url, "INSERT INTO t VALUES (3)"); err != nil {
		t.Fatal(err)
	}
}
