package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemkit/idem/keyring"
)

// keysEnv names the key files when -keys is not given.
const keysEnv = "IDEM_KEYS"

// keysUsage is the -keys flag's help.
const keysUsage = "comma-separated key `files`, the active key first (default $" + keysEnv + "): " +
	"a key's id is its file name without extension; a file holds 32 bytes, raw, in hex or in base64"

// loadKeys returns the ring of the key files list names (comma-separated,
// the active first), or nil for an empty list.
func loadKeys(ctx context.Context, list string) (*keyring.Ring, error) {
	if list == "" {
		return nil, nil
	}
	paths := map[string]string{}
	var ids []string
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		id := strings.TrimSuffix(filepath.Base(p), filepath.Ext(p))
		paths[id] = p
		ids = append(ids, id)
	}
	return keyring.Fetch(ctx, ids, func(_ context.Context, id string) ([]byte, error) {
		b, err := os.ReadFile(paths[id])
		if err != nil {
			return nil, err
		}
		return decodeKey(b)
	})
}

// decodeKey reads a key file's content: keyring.KeySize raw bytes, or
// their hex or base64 encoding (surrounding white space ignored).
func decodeKey(b []byte) ([]byte, error) {
	if len(b) == keyring.KeySize {
		return b, nil
	}
	s := strings.TrimSpace(string(b))
	if k, err := hex.DecodeString(s); err == nil && len(k) == keyring.KeySize {
		return k, nil
	}
	if k, err := base64.StdEncoding.DecodeString(s); err == nil && len(k) == keyring.KeySize {
		return k, nil
	}
	return nil, fmt.Errorf("want %d bytes, raw, in hex or in base64", keyring.KeySize)
}

func rekeyCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	a := newAdminFlags("rekey", "DIR -keys ACTIVE[,OLDER...] [-json]", `
Seals every saved result again under the active key (the first of -keys, or
of $`+keysEnv+`): results sealed under the older keys listed, and results
saved in clear before encryption was turned on. Once it reports nothing
left under an older key, that key can leave the ring. It reports how many
results it sealed again, how many were already under the active key, and
how many it left: sealed under a key not given (missing), damaged (corrupt),
or changed while it ran.

Each result is written back with a write fenced on its record's token, and a
result already under the active key is not written: it is safe to stop
(Ctrl-C) and run again, which does what the last run left.

It needs write access: it cannot run while a server holds the store (a
server rekeys through idem.Store.Rekey).`, stderr,
		"idem rekey /var/lib/refund-tool/idem -keys /etc/idem/keys/2027-01.key,/etc/idem/keys/2026-12.key",
		"idem rekey /var/lib/refund-tool/idem -json -keys /etc/idem/keys/2027-01.key")
	if _, err := a.parse(args, "DIR"); err != nil {
		return err
	}
	if a.keys == "" {
		fmt.Fprintf(stderr, "idem rekey: no keys: give -keys or $%s\n", keysEnv)
		return errUsage
	}
	s, err := a.openStore(true, nil)
	if err != nil {
		return err
	}
	r, err := s.Rekey(ctx)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if r != nil {
		if a.json {
			if jerr := writeJSON(stdout, r); err == nil {
				err = jerr
			}
		} else {
			fmt.Fprintf(stdout, "rekey: %d results scanned, %d sealed again under %s, %d already under it; "+
				"left: %d missing their key%s, %d corrupt, %d changed meanwhile\n",
				r.Scanned, r.Rekeyed, s.Options().Keys.Active(), r.Current, r.Missing, missingList(r.MissingKeys),
				r.Corrupt, r.Changed)
		}
		if err == nil && r.Missing+r.Corrupt > 0 {
			// Exit 1: the rotation is not done, the older key still needed.
			err = fmt.Errorf("%d results left under a key not given or damaged", r.Missing+r.Corrupt)
		}
	}
	return err
}

func missingList(ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	return " (" + strings.Join(ids, ", ") + ")"
}
