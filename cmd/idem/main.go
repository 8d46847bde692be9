// Command idem is idem's command line: the demo, and the operator's views
// of a store directory.
//
//	idem demo [-seed N] [-agents N] [DIR]
//	idem inspect DIR [-scope SCOPE] KEY
//	idem ls|stats|sweep|export|verify DIR [flags]
//	idem admin DIR [-addr HOST:PORT] [-write]
//	idem resolve DIR [-scope SCOPE] KEY (-committed -status N | -not-committed) -note WHY
//	idem torture [-duration D] [-workers N] [-json] [DIR]
//	idem loss DIR [-accept [-window D] | -end]
//	idem backup [-json] DIR FILE|-
//	idem restore [-json] FILE|- DIR
//	idem proxy DIR -upstream URL -scope SCOPE [-listen HOST:PORT] [-resolver URL]
//	idem mcp-proxy DIR [-listen HOST:PORT] [-scope SCOPE] (-upstream URL | -- COMMAND [ARGS...])
//
// A store directory is an argument, or -dir DIR in its place; flags may
// come before or after the arguments.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
)

// command is one subcommand. run gets the arguments after the command's
// name; it returns errUsage for bad usage (exit status 2), flag.ErrHelp
// when -h asked for its usage (exit status 0, as for "idem help"), and any
// other error for failure (exit status 1).
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is the subcommand table; add new subcommands here.
func commands() []command {
	return []command{
		{name: "demo", summary: "run agents against a refund tool server, without keys and with idem", run: demoCommand},
		{name: "inspect", summary: "tell the story of one key in a store directory", run: inspectCommand},
		{name: "ls", summary: "list a store's records, stuck and needing-attention claims first", run: lsCommand},
		{name: "stats", summary: "count a store's records by state, with its age and size", run: statsCommand},
		{name: "sweep", summary: "run recovery and reclamation on a store now, reporting each decision", run: sweepCommand},
		{name: "export", summary: "write every record of a store as JSON lines, for audits", run: exportCommand},
		{name: "admin", summary: "serve the operator's page for a store directory on 127.0.0.1, behind a token", run: adminServeCommand},
		{name: "resolve", summary: "settle a stale claim by an operator's verdict: committed with a result, or not", run: resolveCommand},
		{name: "verify", summary: "check every record, table and the log of a store; exit 1 if anything is damaged", run: verifyCommand},
		{name: "torture", summary: "SIGKILL a child running Do at random moments; check nothing ran twice or was lost", run: tortureCommand},
		{name: "loss", summary: "show, accept or end a store's loss window (absent keys asked about before they run)", run: lossCommand},
		{name: "rekey", summary: "seal every saved result again under the active key, after a key rotation", run: rekeyCommand},
		{name: "backup", summary: "write a consistent backup of a store directory to a file", run: backupCommand},
		{name: "restore", summary: "restore a backup file into an empty directory", run: restoreCommand},
		{name: "proxy", summary: "serve idem's contract in front of an HTTP tool server written in any language", run: proxyCommand},
		{name: "mcp-proxy", summary: "serve idem's contract in front of an MCP server (a child over stdio, or streamable HTTP)", run: mcpProxyCommand},
	}
}

// errUsage is returned by a command whose arguments were wrong, after it
// printed why.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches args to a subcommand and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			return 2
		default:
			fmt.Fprintf(stderr, "idem %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "idem: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: idem <command> [arguments] [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "A command on a store takes its directory as an argument (or as -dir DIR);")
	fmt.Fprintln(w, "flags may come before or after the arguments.")
	fmt.Fprintln(w, `Run "idem <command> -h" for a command's arguments, flags and examples.`)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Example:")
	fmt.Fprintln(w, "  idem ls /var/lib/refund-tool/idem -state stuck")
}
