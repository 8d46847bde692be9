package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTakeDir(t *testing.T) {
	dirKey, fileDir := []string{"DIR", "KEY"}, []string{"FILE", "DIR"}
	for _, tc := range []struct {
		name     string
		flagDir  string
		pos      []string
		names    []string
		optional bool
		dir      string
		rest     []string
		err      string // in what is printed; "" when the arguments are good
	}{
		{name: "argument", pos: []string{"d"}, names: []string{"DIR"}, dir: "d"},
		{name: "flag", flagDir: "d", names: []string{"DIR"}, dir: "d"},
		{name: "both the same", flagDir: "d/", pos: []string{"./d"}, names: []string{"DIR"}, dir: "./d"},
		{name: "both different", flagDir: "d", pos: []string{"e"}, names: []string{"DIR"},
			err: "the store directory is given twice and differs: -dir d and the argument e"},
		{name: "missing", names: []string{"DIR"},
			err: `idem x: the store directory is missing: want "idem x DIR" or "idem x -dir DIR"`},
		{name: "too many", pos: []string{"d", "e"}, names: []string{"DIR"}, err: `got 2 arguments: ["d" "e"]`},
		{name: "DIR KEY", pos: []string{"d", "k"}, names: dirKey, dir: "d", rest: []string{"k"}},
		{name: "-dir DIR KEY", flagDir: "d", pos: []string{"k"}, names: dirKey, dir: "d", rest: []string{"k"}},
		{name: "-dir DIR without KEY", flagDir: "d", names: dirKey,
			err: `want "idem x DIR KEY" or "idem x -dir DIR KEY"; got 0 arguments beside -dir`},
		{name: "KEY alone", pos: []string{"k"}, names: dirKey, err: `got 1 argument: ["k"]`},
		{name: "FILE DIR", pos: []string{"f", "d"}, names: fileDir, dir: "d", rest: []string{"f"}},
		{name: "FILE -dir DIR", flagDir: "d", pos: []string{"f"}, names: fileDir, dir: "d", rest: []string{"f"}},
		{name: "optional, absent", names: []string{"DIR"}, optional: true},
		{name: "optional, given", pos: []string{"d"}, names: []string{"DIR"}, optional: true, dir: "d"},
		{name: "optional, too many", pos: []string{"d", "e"}, names: []string{"DIR"}, optional: true,
			err: `want "idem x [DIR]" or "idem x -dir DIR"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			fs := flag.NewFlagSet("idem x", flag.ContinueOnError)
			fs.SetOutput(&out)
			setUsage(fs, "DIR", "Does x.", "idem x d")
			dir, rest, err := takeDir(fs, tc.flagDir, tc.pos, tc.names, tc.optional)
			if tc.err != "" {
				require.ErrorIs(t, err, errUsage)
				require.Contains(t, out.String(), tc.err)
				require.Contains(t, out.String(), "usage: idem x DIR", "the usage follows why")
				return
			}
			require.NoError(t, err, out.String())
			require.Equal(t, tc.dir, dir)
			require.True(t, slices.Equal(tc.rest, rest), "rest %q, want %q", rest, tc.rest)
			require.Empty(t, out.String())
		})
	}
}

// TestRun_StoreDir runs every command on a store with the store directory
// given each way: as an argument, as -dir, both (the same), and refuses
// both when they differ, and none.
func TestRun_StoreDir(t *testing.T) {
	store := verifiedStore(t)
	other := t.TempDir()
	file := filepath.Join(t.TempDir(), "store.backup")
	for _, tc := range []struct {
		name          string
		before, after []string // the arguments before and after the directory
		fresh         bool     // the directory is a new one each time (restore)
		code          int
		want          string // in stdout, or in stderr when code is 1
	}{
		{name: "inspect", after: []string{"k3"}, want: "done"},
		{name: "ls", after: []string{"-limit", "0"}, want: "k19"},
		{name: "stats", want: "records"},
		{name: "export", after: []string{"-no-bodies"}, want: `"key":"k3"`},
		{name: "verify", want: "20 records"},
		{name: "sweep", after: []string{"-json"}, want: `"decisions"`},
		{name: "loss", want: "no loss window"},
		{name: "resolve", after: []string{"k3", "-not-committed", "-note", "checked"}, code: 1, want: "no stale claim to settle"},
		{name: "backup", after: []string{file}, want: "backed up store"},
		{name: "restore", before: []string{file}, fresh: true, want: "restored store"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := func() string {
				if tc.fresh {
					return filepath.Join(t.TempDir(), "restored")
				}
				return store
			}
			args := func(flagDir, argDir string) []string {
				a := []string{tc.name}
				if flagDir != "" {
					a = append(a, "-dir", flagDir)
				}
				a = append(a, tc.before...)
				if argDir != "" {
					a = append(a, argDir)
				}
				return append(a, tc.after...)
			}
			d := dir()
			for _, a := range [][]string{args("", dir()), args(dir(), ""), args(d, d)} {
				code, stdout, stderr := runIdem(t, a...)
				require.Equal(t, tc.code, code, "idem %q\n%s%s", a, stdout, stderr)
				if code == 0 {
					require.Contains(t, stdout, tc.want, "idem %q", a)
				} else {
					require.Contains(t, stderr, tc.want, "idem %q", a)
				}
			}

			a := args(other, dir())
			code, _, stderr := runIdem(t, a...)
			require.Equal(t, 2, code, "idem %q", a)
			require.Contains(t, stderr, "idem "+tc.name+": the store directory is given twice and differs")

			code, _, stderr = runIdem(t, tc.name)
			require.Equal(t, 2, code)
			require.Contains(t, stderr, "idem "+tc.name+": the store directory is missing: want \"idem "+tc.name+" ")
		})
	}

	// demo and torture make a store, in a temporary directory unless given
	// one: they refuse two (their runs are tested elsewhere).
	for _, name := range []string{"demo", "torture"} {
		code, _, stderr := runIdem(t, name, "-dir", other, t.TempDir())
		require.Equal(t, 2, code, name)
		require.Contains(t, stderr, "idem "+name+": the store directory is given twice and differs")
		code, _, stderr = runIdem(t, name, "a", "b")
		require.Equal(t, 2, code, name)
		require.Contains(t, stderr, `want "idem `+name+` [DIR]"`)
	}
}

// examples returns the examples that end the -h output of command name
// ("" for idem's own help).
func examples(t *testing.T, name string) []string {
	t.Helper()
	args := []string{"help"}
	if name != "" {
		args = []string{name, "-h"}
	}
	code, _, stderr := runIdem(t, args...)
	require.Equal(t, 0, code)
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	at := slices.IndexFunc(lines, func(l string) bool { return l == "Example:" || l == "Examples:" })
	require.True(t, at >= 0, "idem %q ends with no example:\n%s", args, stderr)
	ex := lines[at+1:]
	require.NotEmpty(t, ex, "idem %q", args)
	prefix := strings.TrimSuffix("  idem "+name, " ")
	for _, l := range ex {
		require.True(t, l == prefix || strings.HasPrefix(l, prefix+" "),
			"idem %q: after %q comes %q, not an example", args, lines[at], l)
	}
	return ex
}

// TestRun_HelpEndsWithExamples checks that idem's help and every
// command's -h end with examples of that command.
func TestRun_HelpEndsWithExamples(t *testing.T) {
	examples(t, "")
	for _, c := range commands() {
		examples(t, c.name)
	}
}

// TestRun_Examples runs the examples of the commands on a store (their
// paths replaced by a copy of a test store, and shell redirections cut
// off): none is a usage error.
func TestRun_Examples(t *testing.T) {
	store := verifiedStore(t)
	work := t.TempDir()
	backup := filepath.Join(work, "store.backup")
	mustRun(t, "backup", store, backup)
	body := filepath.Join(work, "re_7.json")
	require.NoError(t, os.WriteFile(body, []byte(`{"refund":"re_7"}`), 0o600))
	for _, c := range commands() {
		if c.name == "demo" || c.name == "torture" {
			continue // they run for long; their arguments are tested above
		}
		for _, ex := range examples(t, c.name) {
			r := strings.NewReplacer(
				"/var/lib/refund-tool/idem.restored", filepath.Join(t.TempDir(), "restored"),
				"/var/lib/refund-tool/idem", copyDir(t, store),
				"/backups/idem-2026-12-01.backup", backup,
				"re_7.json", body,
				// The proxy listens on free ports.
				"127.0.0.1:8080", "127.0.0.1:0", "127.0.0.1:8765", "127.0.0.1:0")
			words := shellWords(r.Replace(ex))
			if i := slices.IndexFunc(words, func(w string) bool { return w == "|" || w == ">" }); i >= 0 {
				words = words[:i]
			}
			ctx := context.Background()
			if c.name == "admin" || c.name == "proxy" || c.name == "mcp-proxy" {
				// It serves until stopped: stopped at once, once it has
				// opened the store and listened (TestAdminServe and
				// TestProxyCommand and TestMCPProxyCommand_Example serve).
				stopped, cancel := context.WithCancel(ctx)
				cancel()
				ctx = stopped
			}
			var stdout, stderr strings.Builder
			code := run(ctx, words[1:], &stdout, &stderr)
			if code == 2 || strings.Contains(stderr.String(), "usage:") {
				t.Errorf("example %q: exit %d\n%s", ex, code, stderr.String())
			}
		}
	}
}

// shellWords splits an example line as a shell would, for the quoting the
// examples use: double quotes around words with spaces.
func shellWords(line string) []string {
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	for _, r := range line {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}
