package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// genPB builds a generated-code excerpt whose raw descriptor holds desc, as
// protoc-gen-go writes it (16 bytes a line), with one enum= struct tag.
func genPB(desc []byte, pkg string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "package pb\n\n// source: badgerpb4.proto\n\ntype T struct {\n\tOp int32 `protobuf:\"varint,2,opt,name=Op,proto3,enum=%s.Op\"`\n}\n\n", pkg)
	b.WriteString("var file_badgerpb4_proto_rawDesc = []byte{\n")
	for i := 0; i < len(desc); i += 16 {
		b.WriteString("\t")
		for j := i; j < i+16 && j < len(desc); j++ {
			if j > i {
				b.WriteString(" ")
			}
			fmt.Fprintf(&b, "0x%02x,", desc[j])
		}
		b.WriteString("\n")
	}
	b.WriteString("}\n\nvar x = 1\n")
	return []byte(b.String())
}

func TestConvertFile_Proto_RoundTrip(t *testing.T) {
	desc := []byte("\n\x0fbadgerpb4.proto\x12\tbadgerpb4\"\x05\n\x02KV2\x0d.badgerpb4.KV")
	upstream := genPB(desc, "badgerpb4")
	idem, err := convertFile(protoFile, upstream, true)
	if err != nil {
		t.Fatal(err)
	}
	want := genPB(bytes.ReplaceAll(desc, []byte("badgerpb4"), []byte("idembdgpb")), "idembdgpb")
	// The comment keeps upstream's name: only the descriptor and tags change.
	if !bytes.Equal(idem, want) {
		t.Fatalf("to idem:\n%s\nwant:\n%s", idem, want)
	}
	back, err := convertFile(protoFile, idem, false)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, upstream) {
		t.Fatalf("back to upstream:\n%s\nwant:\n%s", back, upstream)
	}
}

func TestConvertFile_Proto_NoDescriptor(t *testing.T) {
	src := []byte("package pb\n\nconst file_badgerpb4_proto_rawDesc = \"\\n\\x0fbadgerpb4.proto\"\n")
	if _, err := convertFile(protoFile, src, true); err == nil {
		t.Fatal("a descriptor in a form carry does not know was converted without an error")
	}
}

func TestConvertFile_Imports(t *testing.T) {
	upstream := []byte("package badger\n\nimport (\n\t\"github.com/dgraph-io/badger/v4/y\"\n\t\"github.com/dgraph-io/ristretto/v2/z\"\n\t\"github.com/golang/protobuf/proto\"\n)\n")
	idem, err := convertFile("db.go", upstream, true)
	if err != nil {
		t.Fatal(err)
	}
	// gofmt sorts the import block again: idemkit now comes after golang.
	want := "package badger\n\nimport (\n\t\"github.com/golang/protobuf/proto\"\n\t\"github.com/idemkit/idem/internal/badger/y\"\n\t\"github.com/idemkit/idem/internal/ristretto/z\"\n)\n"
	if string(idem) != want {
		t.Fatalf("to idem:\n%s\nwant:\n%s", idem, want)
	}
	back, err := convertFile("db.go", idem, false)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, upstream) {
		t.Fatalf("back to upstream:\n%s\nwant:\n%s", back, upstream)
	}
}

func TestConvertFile_TestTag(t *testing.T) {
	for _, c := range []struct{ upstream, idem string }{
		{"/* license */\n\npackage z\n", "//go:build upstream\n\n/* license */\n\npackage z\n"},
		{"//go:build linux\n\npackage z\n", "//go:build upstream && linux\n\npackage z\n"},
		{"//go:build unix && !aix\n\npackage z\n", "//go:build upstream && unix && !aix\n\npackage z\n"},
		{"//go:build linux || darwin\n\npackage z\n", "//go:build upstream && (linux || darwin)\n\npackage z\n"},
	} {
		idem, err := convertFile("z/a_test.go", []byte(c.upstream), true)
		if err != nil {
			t.Fatal(err)
		}
		if string(idem) != c.idem {
			t.Errorf("to idem: %q, want %q", idem, c.idem)
		}
		back, err := convertFile("z/a_test.go", idem, false)
		if err != nil {
			t.Fatal(err)
		}
		if string(back) != c.upstream {
			t.Errorf("back to upstream: %q, want %q", back, c.upstream)
		}
	}
	// Not a test file: no tag.
	if out, _ := convertFile("z/a.go", []byte("package z\n"), true); string(out) != "package z\n" {
		t.Errorf("a non-test file was changed: %q", out)
	}
}

func TestConvertFile_TestTag_Untagged(t *testing.T) {
	for _, src := range []string{"package z\n", "//go:build linux\n\npackage z\n", "//go:build linux && upstream\n\npackage z\n"} {
		if _, err := convertFile("z/a_test.go", []byte(src), false); err == nil {
			t.Errorf("%q: a test file without the leading upstream tag converted without an error", src)
		}
	}
}

func TestConvertTree(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"db.go":           "package badger\n\nimport _ \"github.com/dgraph-io/badger/v4/y\"\n",
		"table/t.go":      "package table\n",
		"table/t_test.go": "package table\n",
		"LICENSE":         "github.com/dgraph-io/badger/v4 stays as it is here\n",
	}
	for name, src := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := convertTree(dir, true); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"db.go":           "package badger\n\nimport _ \"github.com/idemkit/idem/internal/badger/y\"\n",
		"table/t.go":      "package table\n",
		"table/t_test.go": "//go:build upstream\n\npackage table\n",
		"LICENSE":         files["LICENSE"],
	}
	for name, w := range want {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != w {
			t.Errorf("%s: %q, want %q", name, got, w)
		}
	}
}
