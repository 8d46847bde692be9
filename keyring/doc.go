// Package keyring holds the keys a Store encrypts saved results with
// (idem.Options.Keys), and the sealed form those results take in storage.
//
// A Ring holds AES-256-GCM keys, each named by an id, one of them active.
// The Store seals with the active key what a record keeps of the caller's
// data (a result's body and headers, a saved error's text, a Journal's
// arguments) before any backend sees it, and opens it again on replay, so
// that logs, tables, backups, exports and database rows hold ciphertext
// only. docs/encryption.md describes the whole scheme.
//
// # Semantics
//
// A sealed result keeps Status and Truncated in clear; its Body holds the
// envelope (magic, version, key id, nonce, ciphertext and tag) and its
// Header and Error are empty. The associated data binds a ciphertext to
// its scope, key, fingerprint, key id, status and truncation: copied under
// another key, or with a flipped byte, it does not open (ErrCorrupt, never
// a wrong result).
//
// A result that is not sealed opens as it is, so records written before
// encryption was turned on stay readable. A result sealed under a key the
// ring does not hold opens to a *MissingKeyError (ErrMissingKey).
//
// Rotation: a ring made with a new active key seals new results under it
// and opens results under every older key it still holds.
//
// # Caveats
//
// Scopes, keys and fingerprints are stored in clear: they must not carry
// secrets. A caller's plain body that happens to start with the envelope's
// magic bytes reads as sealed (and then as corrupt or missing its key):
// the magic starts with a byte no text payload starts with.
package keyring
