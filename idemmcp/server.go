package idemmcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/backend"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Names on the wire.
const (
	// MetaKey is the member of params._meta (and, in the SEP-3182 shape,
	// of params itself) that carries a call's idempotency key. A Guard
	// also reads MetaKeyDashed and MetaKeyNamespaced, since MCP names no
	// key and clients send each of the three.
	MetaKey = "idempotencyKey"
	// MetaKeyDashed is the reverse-DNS member of params._meta with a
	// dashed name that some clients send the key in.
	MetaKeyDashed = "io.modelcontextprotocol/idempotency-key"
	// MetaKeyNamespaced is the reverse-DNS member of params._meta with a
	// camel-case name that some clients send the key in.
	MetaKeyNamespaced = "io.modelcontextprotocol/idempotencyKey"
	// MetaReplayed is set to true in the _meta of a replayed result.
	MetaReplayed = "idempotentReplayed"
	// MetaFirstRunAt is, in the _meta of a replayed result, when the call
	// whose answer it is began to run: an RFC 3339 time in UTC, with
	// milliseconds. An agent sees no HTTP headers; this tells it that the
	// effect happened then, not now.
	MetaFirstRunAt = "idempotentFirstRunAt"
	// MetaStatus names, in the _meta of a refusal, why the tool did not run:
	// one of the Status constants.
	MetaStatus = "idempotencyStatus"
	// MetaRetryAfter is, in the _meta of a refusal that a retry can get
	// past, the seconds to wait before retrying with the same key.
	MetaRetryAfter = "retryAfterSeconds"
	// Capability is the name of the experimental server capability, and of
	// the _meta member of each protected tool, that tell a client to send
	// keys.
	Capability = "idempotency"
)

// The values of MetaStatus.
const (
	// StatusMissingKey: a write tool was called without a key.
	StatusMissingKey = "missing_key"
	// StatusInvalidKey: the key, or the arguments, cannot be used.
	StatusInvalidKey = "invalid_key"
	// StatusInProgress: a call with the key is still running; retry later.
	StatusInProgress = "in_progress"
	// StatusMismatch: the key was first used with other arguments.
	StatusMismatch = "mismatch"
	// StatusOutcomeUnknown: an earlier attempt's outcome is being resolved.
	StatusOutcomeUnknown = "outcome_unknown"
	// StatusUnavailable: the store failed; the tool did not run; retry.
	StatusUnavailable = "unavailable"
	// StatusOutcomeNotRecorded: the tool ran but its outcome could not be
	// recorded (idem.ErrOutcomeNotRecorded); it may have taken effect, and
	// a retry with the key is held until recovery decides. The tool's own
	// answer is not returned: the key's record does not hold it.
	StatusOutcomeNotRecorded = "outcome_not_recorded"
	// StatusRanTwice: the tool ran, but it stalled past its claim's lease
	// and another call with the key took over before its outcome was
	// recorded (idem.ErrRanTwice): the effect may have happened twice, and
	// the key is marked so. The other call's outcome is the recorded one;
	// a retry with the key gets it. The tool's own answer is not returned.
	StatusRanTwice = "ran_twice"
	// StatusTakenOver: a tool added by AddTxTool stalled past its claim's
	// lease, another call with the key took over, and the stalled call's
	// transaction was rolled back: nothing of it was written. A retry with
	// the key gets the other call's outcome.
	StatusTakenOver = "taken_over"
	// StatusUnauthenticated: the call carries no principal to scope it by.
	StatusUnauthenticated = "unauthenticated"
)

// Defaults for zero Options fields.
const (
	DefaultRetryAfter       = time.Second
	DefaultMaxArgumentBytes = 1 << 20
)

// Options configure a Guard. One of Authenticated, Scope and SharedScope
// must be set: New refuses to guess whose records a call's key lives among.
type Options struct {
	// Authenticated scopes every call by its authenticated principal (the
	// server sits behind auth.RequireBearerToken or the like) and refuses a
	// call that has none.
	Authenticated bool

	// Principal returns the stable identity of a call's bearer: never the
	// token itself, which rotates, and never a session id, which changes
	// when a client reconnects. Default the token info's UserID, or else
	// its Extra["sub"] when that is a string.
	Principal func(*auth.TokenInfo) string

	// Scope, if set, decides every call's scope, which is then joined with
	// the tool name: it is the server saying which callers share records.
	// An error refuses the call (the tool does not run).
	Scope func(ctx context.Context, req *mcp.CallToolRequest) (string, error)

	// SharedScope says that callers without a principal share one scope
	// per tool: right for a stdio server, whose one client is its parent
	// process. Calls that carry a principal are still scoped by it.
	SharedScope bool

	// KeyArgument names a tool argument that carries the key, for models
	// that cannot set _meta (declare it in the tool's input schema). It is
	// read after every _meta name (MetaKey, MetaKeyDashed,
	// MetaKeyNamespaced) and the SEP-3182 top-level params.idempotencyKey,
	// and left out of the fingerprint. Default none.
	KeyArgument string

	// AllowMissingKey runs a write tool called without a key unprotected.
	// Default: such a call is refused with a tool error telling the model
	// how to send one.
	AllowMissingKey bool

	// RetryAfter is the hint, in a refusal for a key in progress, of when
	// to retry. Default 1 second.
	RetryAfter time.Duration

	// Retention overrides the store's retention for these records, when
	// positive.
	Retention time.Duration

	// MaxArgumentBytes bounds the arguments fingerprinted; larger ones are
	// refused. Default 1 MiB. MaxJSONDepth bounds their nesting; default
	// idem.DefaultMaxDepth.
	MaxArgumentBytes, MaxJSONDepth int
}

// A Guard protects write tools: it runs each call once per (scope, key)
// and answers every repeat with the first call's result. Its methods wrap
// raw and typed tool handlers or a whole server (Middleware). A Guard is
// safe for concurrent use; its configuration never changes after New.
type Guard struct {
	store      *idem.Store
	o          Options
	fp         idem.Fingerprinter
	clock      idem.Clock
	retryAfter time.Duration
	// txTools holds the names of the tools AddTxTool added (keys only):
	// Middleware leaves their calls to the transactional middleware
	// AddTxTool added, whichever of the two is outermost.
	txTools sync.Map
}

// New returns a Guard keeping its records in store. It panics if store is
// nil, if none of Authenticated, Scope and SharedScope is set, or if a
// size or duration is negative.
func New(store *idem.Store, opts *Options) *Guard {
	if store == nil {
		panic("idemmcp: New needs a store")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	switch {
	case !o.Authenticated && o.Scope == nil && !o.SharedScope:
		panic("idemmcp: say how calls are scoped: Options.Authenticated, Options.Scope or Options.SharedScope")
	case o.RetryAfter < 0, o.Retention < 0, o.MaxArgumentBytes < 0, o.MaxJSONDepth < 0:
		panic("idemmcp: negative size or duration in Options")
	}
	if o.Principal == nil {
		o.Principal = defaultPrincipal
	}
	if o.MaxArgumentBytes == 0 {
		o.MaxArgumentBytes = DefaultMaxArgumentBytes
	}
	g := &Guard{store: store, o: o, clock: store.Options().Clock, retryAfter: o.RetryAfter,
		fp: idem.Fingerprinter{MaxBytes: o.MaxArgumentBytes, MaxDepth: o.MaxJSONDepth}}
	if g.retryAfter == 0 {
		g.retryAfter = DefaultRetryAfter
	}
	return g
}

func defaultPrincipal(ti *auth.TokenInfo) string {
	if ti.UserID != "" {
		return ti.UserID
	}
	sub, _ := ti.Extra["sub"].(string)
	return sub
}

// protectedKey marks a context in which a Guard already protects the call,
// so that a tool wrapped twice (by Middleware and Handler) claims once.
type protectedKey struct{}

// writeTool reports whether a tool changes something: tools annotated
// read-only or idempotent pass through without a key.
func writeTool(t *mcp.Tool) bool {
	a := t.Annotations
	return a == nil || !a.ReadOnlyHint && !a.IdempotentHint
}

// protect runs one call of a write tool under the contract; next runs the
// tool. It never panics itself; a panic in next holds the claim for the
// store's Resolver (releases it without one) and is re-raised.
func (g *Guard) protect(ctx context.Context, tool string, req *mcp.CallToolRequest, do runner,
	next func(context.Context) (*mcp.CallToolResult, error)) (*mcp.CallToolResult, error) {
	if ctx.Value(protectedKey{}) != nil {
		return next(ctx)
	}
	ctx = context.WithValue(ctx, protectedKey{}, true)
	var p *mcp.CallToolParamsRaw
	if req != nil {
		p = req.Params
	}
	if p == nil {
		p = &mcp.CallToolParamsRaw{Name: tool}
	}
	key, keyed, err := keyOf(p, g.o.KeyArgument)
	if err != nil {
		// Two keys name two intended effects: which one is meant is the
		// client's mistake to fix, not a choice the server may make.
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: fmt.Sprintf("%s did not run: %v; send one key (the same one under every name)", tool, err)}
	}
	if !keyed {
		if g.o.AllowMissingKey {
			return next(ctx)
		}
		return refusal(StatusMissingKey, "", 0, g.missingKeyText(tool)), nil
	}
	if err := backend.ValidateKey(key); err != nil {
		return refusal(StatusInvalidKey, "", 0, fmt.Sprintf("the idempotency key of this %s call is not valid: "+
			"a key is 1 to %d printable ASCII characters; nothing ran", tool, backend.MaxKeyLen)), nil
	}
	scope, err := g.scope(ctx, tool, req)
	if err != nil {
		return refusal(StatusUnauthenticated, key, 0, fmt.Sprintf("%s with idempotency key %q did not run: %v",
			tool, key, err)), nil
	}
	fp, err := g.fingerprint(tool, p.Arguments)
	if err != nil {
		return refusal(StatusInvalidKey, key, 0, fmt.Sprintf("%s with idempotency key %q did not run: %s",
			tool, key, argumentTrouble(err))), nil
	}
	return g.run(ctx, tool, idem.Request{Scope: scope, Key: key, Fingerprint: fp, Retention: g.o.Retention}, do, next)
}

// outcome is what the tool answered, kept beside Do's result so that the
// first caller gets the tool's own values, whatever was saved.
type outcome struct {
	res *mcp.CallToolResult
	err error
}

// runner runs a protected call's effect once per key: idem.Store.Do
// (runDo), or idem.DoTx for a tool added by AddTxTool. tx is true when the
// effect's writes commit with its record, so that a call that ran but was
// not recorded wrote nothing.
type runner struct {
	do func(ctx context.Context, s *idem.Store, req idem.Request,
		fn func(context.Context) (idem.Result, error)) (idem.Result, bool, error)
	tx bool
}

// runDo runs effects with idem.Store.Do.
var runDo = runner{do: func(ctx context.Context, s *idem.Store, req idem.Request,
	fn func(context.Context) (idem.Result, error)) (idem.Result, bool, error) {
	return s.Do(ctx, req, fn)
}}

// run claims the key and runs the tool, or replays or refuses.
func (g *Guard) run(ctx context.Context, tool string, req idem.Request, do runner,
	next func(context.Context) (*mcp.CallToolResult, error)) (*mcp.CallToolResult, error) {
	var ran *outcome
	saved, replayed, err := do.do(ctx, g.store, req, func(ctx context.Context) (idem.Result, error) {
		started := g.clock.Now()
		res, err := next(ctx)
		ran = &outcome{res: res, err: err}
		saved, err := resultOf(tool, res, err)
		saved.Header = map[string][]string{headerFirstRunAt: {started.UTC().Format(time.RFC3339Nano)}}
		return saved, err
	})
	if ran != nil {
		// The tool ran: its caller gets its answer only if the outcome was
		// recorded (late too), as idemhttp answers. Otherwise
		// (ErrOutcomeNotRecorded: storage failed, or another call took the
		// key over) a refusal says what a retry with the key will find.
		if errors.Is(err, idem.ErrOutcomeNotRecorded) {
			return g.refuse(tool, req.Key, err), nil
		}
		if do.tx && err != nil && ran.err == nil && ran.res != nil && !ran.res.IsError && ran.res.InputRequests == nil {
			// The tool succeeded, but its transaction did not commit with
			// the record: nothing it wrote stands, so its answer is not
			// the call's.
			return g.rolledBack(tool, req.Key, err), nil
		}
		return ran.res, ran.err
	}
	var savedErr *idem.SavedError
	if err == nil && replayed || errors.As(err, &savedErr) {
		return replay(req.Key, saved, g.firstRunAt(ctx, req, saved))
	}
	return g.refuse(tool, req.Key, err), nil
}

// resultOf turns a tool's answer into what the store's policy judges and
// may save: the whole CallToolResult as JSON. A tool error is handed on as
// a *ToolError, a protocol error (or Go error) as it is.
func resultOf(tool string, res *mcp.CallToolResult, err error) (idem.Result, error) {
	if err != nil {
		return idem.Result{}, err
	}
	if res == nil {
		res = &mcp.CallToolResult{}
	}
	if res.InputRequests != nil {
		// An input-required answer is not the call's outcome: the client
		// calls again with the responses, and that call must run.
		return idem.Result{}, errors.New("idemmcp: tool asked for input")
	}
	saved, err := SavedResult(res)
	if err == nil && res.IsError {
		err = &ToolError{Tool: tool, Message: textOf(res)}
	}
	return saved, err
}

// textOf joins a result's text content.
func textOf(res *mcp.CallToolResult) string {
	var s string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			if s != "" {
				s += "\n"
			}
			s += t.Text
		}
	}
	return s
}

// headerFirstRunAt names, in the saved idem.Result's Header, when the
// call whose answer it is began to run. The answer itself is kept as the
// tool gave it, so the stamp lives beside it.
const headerFirstRunAt = "Idem-First-Run-At"

// firstRunAt returns when the call whose answer saved is began to run: the
// stamp saved with it, or else (an answer a Resolver saved through
// SavedResult) when its record was first claimed.
func (g *Guard) firstRunAt(ctx context.Context, req idem.Request, saved idem.Result) time.Time {
	if v := saved.Header[headerFirstRunAt]; len(v) == 1 {
		if t, err := time.Parse(time.RFC3339Nano, v[0]); err == nil {
			return t
		}
	}
	if rec, err := g.store.Get(ctx, req.Scope, req.Key); err == nil && rec != nil {
		return rec.FirstSeen
	}
	return time.Time{}
}

// replay answers with a saved result, marked as replayed and with the time
// its call began to run (left out when it is not known).
func replay(key string, saved idem.Result, firstRun time.Time) (*mcp.CallToolResult, error) {
	if len(saved.Body) == 0 {
		// A policy saved a protocol error: it is answered again as one.
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
			Message: fmt.Sprintf("the call with idempotency key %q failed: %s", key, saved.Error)}
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(saved.Body, &res); err != nil {
		return refusal(StatusUnavailable, key, DefaultRetryAfter, fmt.Sprintf(
			"the saved result of the call with idempotency key %q could not be read; it will not run again", key)), nil
	}
	meta := make(mcp.Meta, len(res.Meta)+2)
	for k, v := range res.Meta {
		meta[k] = v
	}
	meta[MetaReplayed] = true
	if !firstRun.IsZero() {
		meta[MetaFirstRunAt] = firstRun.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	res.Meta = meta
	if res.Content == nil {
		res.Content = []mcp.Content{}
	}
	return &res, nil
}

// refuse answers a call that must not run now, as a tool error a model can
// act on.
func (g *Guard) refuse(tool, key string, err error) *mcp.CallToolResult {
	var (
		inProgress *idem.InProgressError
		mismatch   *idem.MismatchError
		unknown    *idem.OutcomeUnknownError
	)
	switch {
	case errors.As(err, &inProgress):
		wait := min(g.retryAfter, inProgress.RetryAfter(g.clock.Now()))
		return refusal(StatusInProgress, key, wait, fmt.Sprintf("%s with idempotency key %q is still running; "+
			"retry with the same key and arguments in %s to get its result", tool, key, secondsText(wait)))
	case errors.As(err, &mismatch):
		return refusal(StatusMismatch, key, 0, fmt.Sprintf("idempotency key %q was first used for %s with different "+
			"arguments; it names that one intended effect and nothing ran: send the original arguments, or a new "+
			"key for a new effect", key, tool))
	case errors.As(err, &unknown):
		var wait time.Duration
		if !unknown.Attention && !unknown.NextCheck.IsZero() {
			wait = max(unknown.NextCheck.Sub(g.clock.Now()), time.Second)
		}
		return refusal(StatusOutcomeUnknown, key, wait, fmt.Sprintf("an earlier %s call with idempotency key %q "+
			"stopped before its outcome was recorded; an operator is resolving whether it took effect, and it will "+
			"not run again until then: do not retry it with a new key", tool, key))
	case errors.Is(err, idem.ErrRanTwice):
		return refusal(StatusRanTwice, key, time.Second, fmt.Sprintf("%s with idempotency key %q ran, but it "+
			"stalled past its lease and another call with the key took over; that call's outcome is the recorded "+
			"one: retry with the same key and arguments to get it", tool, key))
	case errors.Is(err, idem.ErrOutcomeNotRecorded):
		// The tool ran: never "unavailable, retry safely".
		return refusal(StatusOutcomeNotRecorded, key, 0, fmt.Sprintf("%s with idempotency key %q ran, but its "+
			"outcome could not be recorded; it may have taken effect and will not run again until an operator "+
			"resolves it: do not retry it with a new key", tool, key))
	case errors.Is(err, idem.ErrInvalidKey):
		return refusal(StatusInvalidKey, key, 0, fmt.Sprintf("%s with idempotency key %q did not run: %v", tool, key, err))
	default:
		// ErrUnavailable, ErrClosed, ErrCorrupt, a cancelled call: the tool
		// did not run and the key is as it was, so a retry is safe.
		return refusal(StatusUnavailable, key, DefaultRetryAfter, fmt.Sprintf("%s with idempotency key %q did not "+
			"run: its idempotency record could not be read or written; retrying with the same key is safe", tool, key))
	}
}

// rolledBack answers a call whose transactional effect ran but did not
// commit: taken over (the claim was recovered while the tool stalled), or
// the transaction failed.
func (g *Guard) rolledBack(tool, key string, err error) *mcp.CallToolResult {
	if errors.Is(err, idem.ErrFenced) {
		return refusal(StatusTakenOver, key, time.Second, fmt.Sprintf("%s with idempotency key %q stalled past its "+
			"lease and another call with the key took over; its transaction was rolled back, so nothing of it was "+
			"written: retry with the same key and arguments to get the other call's outcome", tool, key))
	}
	return refusal(StatusUnavailable, key, DefaultRetryAfter, fmt.Sprintf("%s with idempotency key %q ran, but its "+
		"transaction did not commit, so nothing of it was written; retrying with the same key is safe", tool, key))
}

// refusal is a tool error with the idempotency status, key and retry hint
// in its _meta.
func refusal(status, key string, retryAfter time.Duration, text string) *mcp.CallToolResult {
	meta := mcp.Meta{MetaStatus: status}
	if key != "" {
		meta[MetaKey] = key
	}
	if retryAfter > 0 {
		meta[MetaRetryAfter] = seconds(retryAfter)
	}
	return &mcp.CallToolResult{Meta: meta, IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// seconds rounds a wait up to whole seconds, at least one.
func seconds(d time.Duration) int {
	return max(int((d+time.Second-1)/time.Second), 1)
}

func secondsText(d time.Duration) string {
	if n := seconds(d); n != 1 {
		return strconv.Itoa(n) + " seconds"
	}
	return "1 second"
}

func (g *Guard) missingKeyText(tool string) string {
	how := "params._meta." + MetaKey
	if g.o.KeyArgument != "" {
		how += " or in the " + strconv.Quote(g.o.KeyArgument) + " argument"
	}
	return fmt.Sprintf("%s changes something and needs an idempotency key; nothing ran. Choose one new key for this "+
		"intended effect (for example a UUID), send it in %s, and send the same key with the same arguments on every "+
		"retry of this effect, so that it happens once.", tool, how)
}

// argumentTrouble says why arguments could not be fingerprinted without
// quoting them.
func argumentTrouble(err error) string {
	switch {
	case errors.Is(err, idem.ErrBodyTooLarge):
		return "its arguments are too large"
	case errors.Is(err, idem.ErrDuplicateMember):
		return "an object in its arguments names a member twice"
	case errors.Is(err, idem.ErrBodyTooDeep):
		return "its arguments nest too deeply"
	default:
		return "its arguments are not valid JSON"
	}
}

// SavedResult returns the idem.Result under which a Guard keeps a tool's
// answer. A Resolver returns it with idem.VerdictCommitted when it finds
// that a call whose process died did take effect: every retry then gets
// this answer, marked as replayed.
func SavedResult(res *mcp.CallToolResult) (idem.Result, error) {
	if res == nil {
		res = &mcp.CallToolResult{}
	}
	body, err := json.Marshal(res)
	if err != nil {
		return idem.Result{}, fmt.Errorf("idemmcp: result not kept: %w", err)
	}
	return idem.Result{Body: body}, nil
}
