package badgerstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem/internal/ristretto/z"
	"golang.org/x/sys/unix"
)

// TestMappingsStayOutOfTheRegistry checks that a file mapped as Badger maps
// its tables is not recorded in x/sys's registry of mappings. Released
// ristretto mapped with unix.Mmap, which records each mapping, and unmapped
// with the bare system call, which leaves the record: one record per table
// ever written, a leak that grew without bound under sustained writes
// (internal/ristretto/PATCHES.md). unix.Munmap unmaps only what the
// registry holds, so it refuses a mapping that is not recorded. The test
// fails when idem builds with released ristretto.
func TestMappingsStayOutOfTheRegistry(t *testing.T) {
	mf, err := z.OpenMmapFile(filepath.Join(t.TempDir(), "table"), os.O_RDWR|os.O_CREATE, 1<<16)
	if err != nil && !errors.Is(err, z.NewFile) {
		t.Fatal(err)
	}
	if err := unix.Munmap(mf.Data); err == nil {
		// The registry held it, and unix.Munmap unmapped it: only the
		// file is left to close.
		mf.Fd.Close()
		t.Fatal("the mapping was recorded in x/sys's registry, which ristretto's munmap never clears")
	} else if !errors.Is(err, unix.EINVAL) {
		t.Fatalf("unix.Munmap of an unrecorded mapping: %v, want EINVAL", err)
	}
	if err := mf.Delete(); err != nil {
		t.Fatal(err)
	}
}
