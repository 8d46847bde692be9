package idemadmin

import (
	"fmt"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
)

// BackupSHA256Trailer is the HTTP trailer in which GET /backup sends the
// file's SHA-256 (hex, as backend.BackupInfo.SHA256) once it is written.
const BackupSHA256Trailer = "Idem-Backup-Sha256"

// backup streams a backup file of the store (idem.Store.Backup) while the
// server goes on serving, so that a cron job can take one:
//
//	curl -fsS -H 'Authorization: ...' -o store.backup https://host/admin/idem/backup
//
// The status is sent before the first byte; a failure after it aborts the
// response, which an HTTP client sees as a transfer cut short (curl exits
// non-zero), and which idem restore refuses as a damaged file anyway.
func (h *handler) backup(w http.ResponseWriter, r *http.Request) {
	if !h.allowed(w, r, AccessBackup) {
		return
	}
	if _, ok := h.s.Backend().(backend.Backuper); !ok {
		writeError(w, http.StatusNotImplemented, fmt.Errorf("the store's backend %T cannot back itself up: %w", h.s.Backend(), idem.ErrNoBackup))
		return
	}
	cw := &countingWriter{w: w}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/octet-stream")
	hdr.Set("Content-Disposition", `attachment; filename="`+h.o.Now().UTC().Format("idem-20060102T150405Z")+`.backup"`)
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Trailer", BackupSHA256Trailer)
	info, err := h.s.Backup(r.Context(), cw)
	switch {
	case err == nil:
		hdr.Set(BackupSHA256Trailer, info.SHA256)
	case cw.n == 0:
		hdr.Del("Trailer")
		hdr.Del("Content-Disposition")
		writeError(w, statusOf(err), err)
	default:
		panic(http.ErrAbortHandler)
	}
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
