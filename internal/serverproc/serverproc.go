// Package serverproc holds what the test helpers that run a database
// server as a child process (pgstore/pgtest, redisstore/redistest) share.
package serverproc

import (
	"net"
	"strings"
)

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// LastLines returns the end of a log or of a command's output, on one line.
func LastLines(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-10):], " / ")
}
