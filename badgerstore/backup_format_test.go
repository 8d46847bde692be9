package badgerstore

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/idemkit/idem/backend"
)

// backupFile returns a backup file holding stream, in chunks of at most
// chunk bytes (the writer's own chunking on top).
func backupFile(t testing.TB, stream []byte, chunk int) []byte {
	var file bytes.Buffer
	bw, err := newBackupWriter(&file, backupHeader{Store: "00112233445566778899aabbccddeeff",
		Time: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Stream: badgerStream})
	if err != nil {
		t.Fatal(err)
	}
	for p := stream; len(p) > 0; {
		n := min(len(p), chunk)
		if _, err := bw.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
		if err := bw.flush(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bw.finish(); err != nil {
		t.Fatal(err)
	}
	return file.Bytes()
}

// FuzzBackupReader feeds the reader altered backup files: it never
// panics, reads back exactly the stream of an intact file, and refuses
// anything else with ErrCorrupt (an empty stream aside, no other file
// passes: that would take a valid SHA-256 at its end).
func FuzzBackupReader(f *testing.F) {
	stream := []byte("the stream: Badger's lists, here any bytes at all")
	good := backupFile(f, stream, 7)
	f.Add(good)
	f.Add(backupFile(f, nil, 1))
	f.Add(good[:len(good)-1])
	f.Fuzz(func(t *testing.T, file []byte) {
		br, err := readBackupHeader(bytes.NewReader(file))
		var got []byte
		if err == nil {
			got, err = io.ReadAll(br)
		}
		switch {
		case err == nil && !bytes.Equal(file, good) && len(got) != 0:
			t.Fatalf("a file other than the intact one read as a backup of %q", got)
		case err == nil && bytes.Equal(file, good) && !bytes.Equal(got, stream):
			t.Fatalf("the intact file read back %q", got)
		case err != nil && !errors.Is(err, backend.ErrCorrupt):
			t.Fatalf("refused without backend.ErrCorrupt: %v", err)
		}
	})
}
