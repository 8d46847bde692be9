package idem_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/badgerstore"
	"github.com/stretchr/testify/require"
)

func TestOptions_Validate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		o      idem.Options
		fields []string
	}{
		{"zero is the defaults", idem.Options{}, nil},
		{"sweep disabled", idem.Options{SweepInterval: -1, Retention: time.Second, Lease: time.Second}, nil},
		{"retention shorter than lease", idem.Options{Retention: time.Second, Lease: time.Minute}, []string{"Retention"}},
		{"retention shorter than default lease", idem.Options{Retention: time.Second, SweepInterval: -1}, []string{"Retention"}},
		{"negative durations", idem.Options{Retention: -1, Lease: -time.Second, RecheckBackoff: -1, CloseTimeout: -1, MaxUnknown: -2},
			[]string{"Retention", "Lease", "RecheckBackoff", "CloseTimeout", "MaxUnknown"}},
		{"lease too short for a heartbeat", idem.Options{Lease: time.Microsecond}, []string{"Lease"}},
		{"sweep longer than retention", idem.Options{Retention: time.Hour, SweepInterval: 2 * time.Hour}, []string{"SweepInterval"}},
		{"unknown durability", idem.Options{Durability: 7}, []string{"Durability"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if tc.fields == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, idem.ErrInvalidOptions)
			var got []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var oe *idem.OptionsError
				require.True(t, errors.As(e, &oe))
				got = append(got, oe.Field)
				require.Contains(t, err.Error(), "Options."+oe.Field)
			}
			require.Equal(t, tc.fields, got)
		})
	}
}

func TestOpen_RefusesNonsenseOptions(t *testing.T) {
	dir := t.TempDir()
	_, err := idem.Open(dir, &idem.Options{Retention: time.Second, Lease: time.Minute})
	require.ErrorIs(t, err, idem.ErrInvalidOptions)
	require.Contains(t, err.Error(), "Options.Retention")
	// The refusal came before the directory was opened: it opens now.
	s, err := idem.Open(dir, &idem.Options{SweepInterval: -1})
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

func TestNew_PanicsOnNonsenseOptions(t *testing.T) {
	b, err := badgerstore.Open("", badgerstore.Options{InMemory: true})
	require.NoError(t, err)
	defer b.Close()
	require.PanicsWithError(t, (&idem.Options{Lease: -time.Second}).Validate().Error(), func() {
		idem.New(b, &idem.Options{Lease: -time.Second})
	})
}
