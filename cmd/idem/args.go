package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// How every subcommand reads its arguments: flags anywhere among the
// positional arguments (people type "idem ls DIR -state stuck"), the store
// directory as a positional argument or as -dir, and a -h that ends with
// examples.

// parseAnywhere parses args with fs, flags and positional arguments in any
// order, and returns the positional ones. It returns flag.ErrHelp when -h
// asked for the usage (printed), and errUsage on a bad flag (the flag
// package printed why).
func parseAnywhere(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsage
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// takeDir finds the store directory among the positional arguments pos of
// a command that takes the arguments names, one of them "DIR": in DIR's
// place, or as -dir (flagDir, "" when not given), in which case pos lacks
// it. Given both ways, they must name the same directory. It returns the
// directory and the other positional arguments in order. An optional
// directory may be left out when DIR is all the command takes ("" then).
// On bad usage it prints why, naming the command and what it expects, and
// the usage, and returns errUsage.
func takeDir(fs *flag.FlagSet, flagDir string, pos, names []string, optional bool) (string, []string, error) {
	at := slices.Index(names, "DIR")
	bad := func(format string, args ...any) (string, []string, error) {
		fmt.Fprintf(fs.Output(), "%s: %s\n\n", fs.Name(), fmt.Sprintf(format, args...))
		fs.Usage()
		return "", nil, errUsage
	}
	switch {
	case len(pos) == len(names):
		dir := pos[at]
		if flagDir != "" && filepath.Clean(flagDir) != filepath.Clean(dir) {
			return bad("the store directory is given twice and differs: -dir %s and the argument %s; give it once", flagDir, dir)
		}
		return dir, slices.Delete(slices.Clone(pos), at, at+1), nil
	case len(pos) == len(names)-1 && flagDir != "":
		return flagDir, pos, nil
	case len(pos) == 0 && flagDir == "" && optional && len(names) == 1:
		return "", nil, nil
	}
	rest := slices.Delete(slices.Clone(names), at, at+1)
	forms := slices.Clone(names)
	if optional {
		forms[at] = "[DIR]"
	}
	want := fmt.Sprintf("want %q or %q", strings.Join(append([]string{fs.Name()}, forms...), " "),
		strings.Join(append([]string{fs.Name(), "-dir DIR"}, rest...), " "))
	if len(pos) == 0 && flagDir == "" {
		return bad("the store directory is missing: %s", want)
	}
	got := fmt.Sprintf("%d arguments", len(pos))
	if len(pos) == 1 {
		got = "1 argument"
	}
	if flagDir != "" {
		got += " beside -dir"
	}
	return bad("%s; got %s: %q", want, got, pos)
}

// setUsage makes fs's usage: the synopsis (after the command's name), what
// the command does, the flags but the hidden ones (their usage ends with
// "(hidden)"), and examples, each one line.
func setUsage(fs *flag.FlagSet, synopsis, about string, examples ...string) {
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: %s %s\n\n%s\n\n", fs.Name(), synopsis, strings.TrimSpace(about))
		// PrintDefaults has no way to hide a flag: print a copy of the
		// flag set without the hidden ones.
		shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
		shown.SetOutput(w)
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.HasSuffix(f.Usage, "(hidden)") {
				shown.Var(f.Value, f.Name, f.Usage)
				shown.Lookup(f.Name).DefValue = f.DefValue // not the value parsed so far
			}
		})
		shown.PrintDefaults()
		fmt.Fprintln(w)
		if len(examples) == 1 {
			fmt.Fprintln(w, "Example:")
		} else {
			fmt.Fprintln(w, "Examples:")
		}
		for _, e := range examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}
