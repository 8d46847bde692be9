// Command carry makes the mechanical changes between an upstream release of
// Badger or ristretto and idem's copy of it, in either direction, so that
// the patch series (internal/upstream/*/NNNN-*.patch) holds only the hunks
// a person wrote. rebase.sh runs it; it is not meant to be run by hand.
//
//	carry -to idem DIR      upstream form -> idem's form
//	carry -to upstream DIR  idem's form -> upstream form
//
// DIR is one copy's root (a Badger or a ristretto tree). In every .go file
// under it, carry:
//
//   - rewrites the import paths: github.com/dgraph-io/badger/v4 ->
//     github.com/idemkit/idem/internal/badger, github.com/dgraph-io/ristretto/v2
//     -> github.com/idemkit/idem/internal/ristretto;
//   - renames the protobuf package badgerpb4 -> idembdgpb in
//     pb/badgerpb4.pb.go (its raw descriptor and the enum= struct tags), so a
//     program that links released Badger beside idem does not register the
//     same proto file and names twice (a panic at init). The two names have
//     the same length, so no length prefix in the descriptor changes;
//   - puts every _test.go file behind the build tag "upstream": upstream's
//     tests run in their own CI step (go test -tags upstream), not in the
//     README's go test ./..., which they would slow by minutes.
//
// A file that was gofmt-clean before is gofmt-clean after: the rewrite can
// change the order gofmt gives an import block.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/build/constraint"
	"go/format"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// modules maps each upstream module path to the path of idem's copy.
var modules = [][2]string{
	{"github.com/dgraph-io/badger/v4", "github.com/idemkit/idem/internal/badger"},
	{"github.com/dgraph-io/ristretto/v2", "github.com/idemkit/idem/internal/ristretto"},
}

const (
	protoUpstream = "badgerpb4"
	protoIdem     = "idembdgpb"
	// protoFile is the generated file, relative to Badger's root, whose
	// protobuf package carry renames.
	protoFile = "pb/badgerpb4.pb.go"
	// testTag is the build tag that carried upstream tests sit behind.
	testTag = "upstream"
)

func main() {
	to := flag.String("to", "", `"idem" or "upstream": the form to convert DIR to`)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: carry -to idem|upstream DIR\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || (*to != "idem" && *to != "upstream") {
		flag.Usage()
		os.Exit(2)
	}
	if err := convertTree(flag.Arg(0), *to == "idem"); err != nil {
		fmt.Fprintln(os.Stderr, "carry:", err)
		os.Exit(1)
	}
}

// convertTree converts every .go file under root, in place.
func convertTree(root string, toIdem bool) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		out, err := convertFile(filepath.ToSlash(rel), src, toIdem)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if bytes.Equal(out, src) {
			return nil
		}
		return os.WriteFile(path, out, d.Type().Perm()|0o200)
	})
}

// convertFile returns src, the file at rel (slash-separated, relative to the
// copy's root), converted to idem's form or to upstream's.
func convertFile(rel string, src []byte, toIdem bool) ([]byte, error) {
	formatted := isFormatted(src)
	out := rewriteImports(src, toIdem)
	if rel == protoFile {
		var err error
		if out, err = renameProto(out, toIdem); err != nil {
			return nil, err
		}
	}
	if strings.HasSuffix(rel, "_test.go") {
		var err error
		if out, err = tagTest(out, toIdem); err != nil {
			return nil, err
		}
	}
	if formatted && !bytes.Equal(out, src) {
		f, err := format.Source(out)
		if err != nil {
			return nil, fmt.Errorf("gofmt after rewriting: %w", err)
		}
		out = f
	}
	return out, nil
}

func isFormatted(src []byte) bool {
	f, err := format.Source(src)
	return err == nil && bytes.Equal(f, src)
}

// rewriteImports replaces each upstream module path by its copy's, or back.
func rewriteImports(src []byte, toIdem bool) []byte {
	for _, m := range modules {
		from, to := m[0], m[1]
		if !toIdem {
			from, to = to, from
		}
		src = bytes.ReplaceAll(src, []byte(from), []byte(to))
	}
	return src
}

var (
	// rawDescStart opens the generated raw descriptor, a []byte literal of
	// 0x.. bytes (protoc-gen-go before v1.36.1 writes it so).
	rawDescStart = regexp.MustCompile(`(?m)^var file_\w+_rawDesc = \[\]byte\{\n`)
	hexByte      = regexp.MustCompile(`0x[0-9a-fA-F]{2}`)
)

// renameProto renames the protobuf package in the raw descriptor of a
// generated .pb.go file and in its enum= struct tags. Everything else (Go
// identifiers, comments) keeps upstream's text.
func renameProto(src []byte, toIdem bool) ([]byte, error) {
	from, to := protoUpstream, protoIdem
	if !toIdem {
		from, to = to, from
	}
	loc := rawDescStart.FindIndex(src)
	if loc == nil {
		return nil, errors.New("no []byte raw descriptor found: the generated code changed form, extend carry's renameProto")
	}
	end := bytes.Index(src[loc[1]:], []byte("\n}\n"))
	if end < 0 {
		return nil, errors.New("raw descriptor has no end")
	}
	body := src[loc[1] : loc[1]+end]
	toks := hexByte.FindAllIndex(body, -1)
	desc := make([]byte, len(toks))
	for i, t := range toks {
		v, err := strconv.ParseUint(string(body[t[0]+2:t[1]]), 16, 8)
		if err != nil {
			return nil, err
		}
		desc[i] = byte(v)
	}
	n := bytes.Count(desc, []byte(from))
	if n == 0 && bytes.Contains(desc, []byte(to)) {
		return src, nil // already in the wanted form
	}
	if n == 0 {
		return nil, fmt.Errorf("raw descriptor does not name package %q", from)
	}
	desc = bytes.ReplaceAll(desc, []byte(from), []byte(to))
	out := make([]byte, 0, len(src))
	out = append(out, src[:loc[1]]...)
	prev := 0
	for i, t := range toks {
		out = append(out, body[prev:t[0]]...)
		out = fmt.Appendf(out, "0x%02x", desc[i])
		prev = t[1]
	}
	out = append(out, body[prev:]...)
	out = append(out, src[loc[1]+end:]...)
	return bytes.ReplaceAll(out, []byte("enum="+from+"."), []byte("enum="+to+".")), nil
}

// buildLine finds a file's //go:build line.
var buildLine = regexp.MustCompile(`(?m)^//go:build .*\n`)

// tagTest puts a test file behind the build tag testTag, or takes it out.
// A file with a constraint of its own gets testTag && (its constraint).
func tagTest(src []byte, toIdem bool) ([]byte, error) {
	tag := &constraint.TagExpr{Tag: testTag}
	m := buildLine.FindIndex(src)
	if m == nil {
		if !toIdem {
			return nil, fmt.Errorf("test file is not behind the build tag %q", testTag)
		}
		return append([]byte("//go:build "+testTag+"\n\n"), src...), nil
	}
	expr, err := constraint.Parse(strings.TrimSuffix(string(src[m[0]:m[1]]), "\n"))
	if err != nil {
		return nil, err
	}
	var line string
	switch {
	case toIdem:
		line = "//go:build " + (&constraint.AndExpr{X: tag, Y: expr}).String() + "\n"
	case expr.String() == tag.String():
		// Only the tag: take out the line and the blank line after it.
		end := m[1]
		if bytes.HasPrefix(src[end:], []byte("\n")) {
			end++
		}
		return append(append([]byte{}, src[:m[0]]...), src[end:]...), nil
	default:
		rest := dropLeadingTag(expr)
		if rest == nil {
			return nil, fmt.Errorf("test file's constraint %q does not start with %q", expr, testTag+" &&")
		}
		line = "//go:build " + rest.String() + "\n"
	}
	return append(append(append([]byte{}, src[:m[0]]...), line...), src[m[1]:]...), nil
}

// dropLeadingTag returns expr without its leading "testTag &&", or nil if
// it does not start so. "a && b && c" parses as (a && b) && c.
func dropLeadingTag(expr constraint.Expr) constraint.Expr {
	and, ok := expr.(*constraint.AndExpr)
	if !ok {
		return nil
	}
	if tag, ok := and.X.(*constraint.TagExpr); ok && tag.Tag == testTag {
		return and.Y
	}
	x := dropLeadingTag(and.X)
	if x == nil {
		return nil
	}
	return &constraint.AndExpr{X: x, Y: and.Y}
}
