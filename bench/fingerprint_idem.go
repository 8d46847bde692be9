package main

import "github.com/idemkit/idem"

// idemFingerprint is idem's request fingerprint, the default
// Fingerprinter's.
func idemFingerprint(method, route, contentType string, body []byte) (string, error) {
	return idem.Fingerprinter{}.Sum(method, route, contentType, body)
}
