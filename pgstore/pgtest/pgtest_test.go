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
