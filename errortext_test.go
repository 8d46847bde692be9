package idem_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/stretchr/testify/require"
)

// TestLogger_ErrorText: the Logger logs an effect's error in full (the
// server's own log) unless Options.ErrorText is set; then it logs what the
// hook gives, as the record keeps.
func TestLogger_ErrorText(t *testing.T) {
	secret := errors.New("refund failed: token=sk_live_123")
	for _, tc := range []struct {
		name      string
		text      func(error) string
		want, not string
	}{
		{"default", nil, "sk_live_123", ""},
		{"hook", func(error) string { return "refund failed" }, "refund failed", "sk_live_123"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			s := openStoreWith(t, "", &idem.Options{Logger: l, ErrorText: tc.text}, badgerstore.Options{InMemory: true})
			_, _, err := s.Do(context.Background(), idem.Request{Key: "k", Fingerprint: "fp"},
				func(context.Context) (idem.Result, error) { return idem.Result{}, secret })
			require.ErrorIs(t, err, secret)
			require.Contains(t, buf.String(), tc.want)
			if tc.not != "" {
				require.NotContains(t, buf.String(), tc.not)
			}
			rec, err := s.Get(context.Background(), "", "k")
			require.NoError(t, err)
			require.False(t, strings.Contains(rec.Recovered, "sk_live"), "the record never keeps the text: %q", rec.Recovered)
		})
	}
}
