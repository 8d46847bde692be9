package pgstore_test

import (
	"testing"

	"github.com/idemkit/idem/backend"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestConformance runs the whole conformance suite against PostgreSQL: every
// backend a test asks for gets a table of its own.
func TestConformance(t *testing.T) {
	p := pool(t)
	idemtest.TestBackend(t, func(t testing.TB) backend.Backend {
		return newBackend(t, p, nil)
	})
}

// TestConformance_Encrypted runs the suite with results encrypted by the
// Store (idem.Options.Keys), on the extended protocol and on the simple
// one.
func TestConformance_Encrypted(t *testing.T) {
	t.Run("extended", func(t *testing.T) {
		p := pool(t)
		idemtest.TestBackendEncrypted(t, func(t testing.TB) backend.Backend {
			return newBackend(t, p, nil)
		})
	})
	t.Run("simple", func(t *testing.T) {
		p := simplePool(t)
		idemtest.TestBackendEncrypted(t, func(t testing.TB) backend.Backend {
			return newBackend(t, p, nil)
		})
	})
}

// TestConformance_SimpleProtocol runs the suite again on a pool that sends
// every statement with the simple protocol, as pools behind PgBouncer in
// transaction mode are configured: a Claim's two statements then travel as
// one multi-statement query.
func TestConformance_SimpleProtocol(t *testing.T) {
	p := simplePool(t)
	idemtest.TestBackend(t, func(t testing.TB) backend.Backend {
		return newBackend(t, p, nil)
	})
}

// simplePool returns a pool that sends every statement with the simple
// protocol, closed when the test ends.
func simplePool(t testing.TB) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(needServer(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestConformance_IsolationLevels runs the suite on pools whose sessions
// default to a stricter isolation than READ COMMITTED: concurrent claims
// then fail with serialization errors, which the backend retries, and the
// contract holds all the same.
func TestConformance_IsolationLevels(t *testing.T) {
	for _, iso := range []string{"repeatable read", "serializable"} {
		t.Run(iso, func(t *testing.T) {
			cfg, err := pgxpool.ParseConfig(needServer(t))
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = iso
			p, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			idemtest.TestBackend(t, func(t testing.TB) backend.Backend {
				return newBackend(t, p, nil)
			})
		})
	}
}

// TestConformance_ReadFirst runs the suite with every Claim reading first
// (a SELECT, then the batch when the key may be claimable), the path Claim
// takes when most keys it sees are taken.
func TestConformance_ReadFirst(t *testing.T) {
	p := pool(t)
	idemtest.TestBackend(t, func(t testing.TB) backend.Backend {
		b := newBackend(t, p, nil)
		pgstore.SetReadFirst(b, "always")
		return b
	})
}
