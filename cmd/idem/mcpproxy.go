package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemproxy"
	"github.com/idemkit/idem/idemproxy/mcpproxy"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// idem mcp-proxy serves mcpproxy.Proxy: an upstream MCP server (a
// child over stdio, or a streamable HTTP endpoint) offered to clients over
// stdio or streamable HTTP, its write tools guarded as idemmcp guards them.

// mcpProxyFlags are idem mcp-proxy's flags.
type mcpProxyFlags struct {
	serveFlags
	upstream, listen    string
	guard, pass, keyArg string
	plain               bool
	idle                time.Duration
	command             []string // after "--"
}

func newMCPProxyFlags(stderr io.Writer) *mcpProxyFlags {
	f := &mcpProxyFlags{}
	fs := flag.NewFlagSet("idem mcp-proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.addServeFlags(fs, "whose keys: shared (default over stdio), fixed:NAME or header:NAME (with -listen; set by the authenticating gateway)")
	fs.StringVar(&f.upstream, "upstream", "", "the upstream's streamable HTTP `URL`, in place of a command after --")
	fs.StringVar(&f.listen, "listen", "", "serve streamable HTTP on `host:port` (default: serve stdio)")
	fs.StringVar(&f.guard, "guard", "", "comma-separated `tools` guarded whatever their annotations say")
	fs.StringVar(&f.pass, "pass", "", "comma-separated `tools` passed through unguarded")
	fs.DurationVar(&f.idle, "session-timeout", 30*time.Minute, "with -listen, close a client session idle this long, and its upstream session (with a command, its child); 0 never")
	fs.BoolVar(&f.plain, "plain", false, "forward only, with no store (for comparisons); DIR is then not needed")
	fs.StringVar(&f.keyArg, "key-argument", "", "a tool `argument` that may carry the key, for models that cannot set _meta")
	setUsage(fs, "DIR [-listen HOST:PORT] [-scope SCOPE] [-resolver URL] (-upstream URL | -- COMMAND [ARGS...])", `
Puts idem's contract in front of an MCP server written in any language: it
starts the upstream as a child over stdio (the command after --) or connects
to its streamable HTTP endpoint (-upstream), lists its tools, prompts and
resources, and offers the same to its own client over stdio (or over
streamable HTTP with -listen): the same names, schemas, annotations and
server name. A client that does not know idem sees the upstream's server:
each client session gets its own upstream session (with a command, its own
child), through which notifications, progress, cancellation, subscriptions
and the upstream's sampling, elicitation and roots requests pass.

Write tools are guarded as idemmcp guards them: the annotations decide
(readOnlyHint and idempotentHint pass through; -guard and -pass override),
the key is read under every name idemmcp reads (_meta.idempotencyKey,
io.modelcontextprotocol/idempotency-key, io.modelcontextprotocol/idempotencyKey,
-key-argument), each key runs once, and a repeat gets the first result with
_meta.idempotentReplayed and idempotentFirstRunAt.

An upstream that could not be reached releases the claim; a call it was sent
and never answered (the child died, the connection dropped) is an unknown
outcome, held for the -resolver URL (docs/proxy.md), or for an operator
without one. A child that died is started again for the next call.

The logs go to stderr; over stdio, stdout carries only the protocol.`,
		"idem mcp-proxy /var/lib/refund-tool/idem -- node server.js",
		"idem mcp-proxy /var/lib/refund-tool/idem -listen 127.0.0.1:8090 -scope header:X-Tenant -upstream http://127.0.0.1:8000/mcp -resolver http://127.0.0.1:8001/resolve")
	return f
}

func mcpProxyCommand(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f := newMCPProxyFlags(stderr)
	if at := slices.Index(args, "--"); at >= 0 {
		args, f.command = args[:at], args[at+1:]
	}
	// -plain may come anywhere: look for it before parsing, which needs
	// to know whether DIR is required.
	plain := slices.Contains(args, "-plain") || slices.Contains(args, "--plain")
	if err := f.parseServe(args, plain); err != nil {
		return err
	}
	opts, err := f.options(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "idem mcp-proxy: %v\n\n", err)
		f.fs.Usage()
		return errUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	opts.Logger = logger
	var store *idem.Store
	if !f.plain {
		if store, err = f.openProxyStore(ctx, logger); err != nil {
			return err
		}
		defer func() {
			if cerr := store.Close(); err == nil {
				err = cerr
			}
		}()
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()
	p, err := mcpproxy.New(ctx, store, opts)
	if err != nil {
		return err
	}
	defer p.Close()
	served := make(chan error, 2)
	var adminSrv *http.Server
	if f.admin != "" && store != nil {
		if adminSrv, err = serveProxyAdmin(f.admin, store, &f.decisions, stderr, served); err != nil {
			return err
		}
		defer adminSrv.Close()
	}
	storeLabel := f.dir
	if store == nil {
		storeLabel = "no store (plain forwarding)"
	}
	upstream := f.upstream
	if upstream == "" {
		upstream = strings.Join(f.command, " ")
	}
	if f.listen == "" {
		fmt.Fprintf(stderr, "idem mcp-proxy: serving stdio in front of %s (%d tools, store %s)\n", upstream, len(p.Tools()), storeLabel)
		err := p.NewServer().Run(ctx, &mcp.StdioTransport{})
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: p.Handler(&mcp.StreamableHTTPOptions{SessionTimeout: f.idle}), ReadHeaderTimeout: 10 * time.Second}
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "idem mcp-proxy: serving http://%s in front of %s (%d tools, store %s, scope %s)\n",
		ln.Addr(), upstream, len(p.Tools()), storeLabel, f.scope)
	select {
	case err := <-served:
		_ = srv.Close()
		return err
	case <-ctx.Done():
	}
	return shutdownProxy(srv, nil, f.shutdown, stderr)
}

// options turns the flags into mcpproxy.Options.
func (f *mcpProxyFlags) options(stderr io.Writer) (*mcpproxy.Options, error) {
	o := &mcpproxy.Options{GuardTools: splitList(f.guard), PassTools: splitList(f.pass)}
	o.Guard.KeyArgument = f.keyArg
	o.Guard.Retention = f.retention
	switch {
	case f.upstream != "" && len(f.command) > 0:
		return nil, errors.New("give the upstream once: -upstream URL or a command after --, not both")
	case f.upstream != "":
		if !strings.HasPrefix(f.upstream, "http://") && !strings.HasPrefix(f.upstream, "https://") {
			return nil, fmt.Errorf("-upstream %q: want an http:// or https:// URL", f.upstream)
		}
		o.Transport = func(context.Context) (mcp.Transport, error) {
			return &mcp.StreamableClientTransport{Endpoint: f.upstream}, nil
		}
	case len(f.command) > 0:
		o.Transport = func(context.Context) (mcp.Transport, error) {
			cmd := exec.Command(f.command[0], f.command[1:]...)
			cmd.Stderr = stderr
			return &mcp.CommandTransport{Command: cmd}, nil
		}
	default:
		return nil, errors.New("no upstream: give -upstream URL or a command after --")
	}
	scope := f.scope
	if f.plain {
		scope = "shared" // no Guard: the scope is never read
	}
	if scope == "" {
		if f.listen != "" {
			return nil, errors.New("-scope is required with -listen: header:NAME, fixed:NAME or shared")
		}
		scope = "shared"
	}
	kind, arg, _ := strings.Cut(scope, ":")
	switch {
	case scope == "shared":
		o.Guard.SharedScope = true
	case kind == "fixed" && arg != "":
		o.Guard.Scope = func(context.Context, *mcp.CallToolRequest) (string, error) { return arg, nil }
	case kind == "header" && arg != "" && f.listen != "":
		o.Guard.Scope = func(_ context.Context, req *mcp.CallToolRequest) (string, error) {
			if req.Extra == nil || req.Extra.Header.Get(arg) == "" {
				return "", fmt.Errorf("no %s header: the gateway in front of the proxy sets it", arg)
			}
			return req.Extra.Header.Get(arg), nil
		}
	default:
		return nil, fmt.Errorf("-scope %q: want shared, fixed:NAME or, with -listen, header:NAME", scope)
	}
	if kill := f.killer(); kill != nil {
		o.At = func(p idemproxy.Point, _ *mcp.CallToolRequest) { kill(p) }
	}
	return o, nil
}
