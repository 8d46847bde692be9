package idemmcp

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Defaults for zero Client fields, as for idemhttp.Transport.
const (
	DefaultMaxAttempts = 5
	DefaultMaxElapsed  = time.Minute
	DefaultBaseDelay   = 100 * time.Millisecond
	DefaultMaxDelay    = 10 * time.Second
)

// Client calls tools for a Go agent on the SDK: it sends a key with every
// call, in params._meta.idempotencyKey, and retries with the same key and
// arguments when an attempt fails on the transport (a dropped connection,
// a server that died, an attempt timeout) or is answered "in progress",
// "unavailable", "ran twice" or "taken over" (the retry gets the recorded
// outcome), with exponential backoff and full jitter or the server's
// retryAfterSeconds, until MaxAttempts or MaxElapsed. Other answers, tool
// errors and protocol errors included, are returned as they are.
//
// Its zero value needs Session or Connect. It is safe for concurrent use
// as long as its fields are not changed.
type Client struct {
	// Session makes the calls, until a transport failure when Connect is
	// set.
	Session *mcp.ClientSession

	// Connect, if set, connects a new session: for the first call when
	// Session is nil, and after a transport failure, whose session it
	// closes (a server restarted, a connection reset). The retry's key is
	// the same, so a new session changes nothing for the server.
	Connect func(ctx context.Context) (*mcp.ClientSession, error)

	// MaxAttempts bounds the attempts of one call, the first included.
	// Default 5; 1 turns retries off.
	MaxAttempts int

	// MaxElapsed bounds the time from the first attempt: no wait or retry
	// starts past it. Default 1 minute.
	MaxElapsed time.Duration

	// AttemptTimeout bounds one attempt; an attempt that times out is
	// retried. Default none (MaxElapsed and ctx bound it).
	AttemptTimeout time.Duration

	// BaseDelay and MaxDelay shape the backoff: the wait before retry n is
	// drawn from [0, min(MaxDelay, BaseDelay·2ⁿ⁻¹)]. A server's
	// retryAfterSeconds replaces it. Defaults 100 ms and 10 s.
	BaseDelay, MaxDelay time.Duration

	// Clock times the waits and MaxElapsed. Default the wall clock.
	Clock idem.Clock

	// Jitter returns a random duration in [0, max]. Default uniform.
	Jitter func(max time.Duration) time.Duration

	mu      sync.Mutex         // guards cur and dropped
	cur     *mcp.ClientSession // the session in use; nil until the first call
	dropped bool               // Session failed and was closed
}

// WithKey returns a copy of p with key in _meta.idempotencyKey.
func WithKey(p *mcp.CallToolParams, key string) *mcp.CallToolParams {
	cp := *p
	cp.Meta = make(mcp.Meta, len(p.Meta)+1)
	maps.Copy(cp.Meta, p.Meta)
	cp.Meta[MetaKey] = key
	return &cp
}

// Replayed reports whether a result is a replay of an earlier call's.
func Replayed(res *mcp.CallToolResult) bool {
	if res == nil {
		return false
	}
	v, _ := res.Meta[MetaReplayed].(bool)
	return v
}

// Status returns the idempotency status of a refusal (one of the Status
// constants), or "" for an answer of the tool itself.
func Status(res *mcp.CallToolResult) string {
	if res == nil {
		return ""
	}
	s, _ := res.Meta[MetaStatus].(string)
	return s
}

// CallStep calls a step planned with an idem.Journal: its tool with the
// arguments and key saved when it was first planned.
func (c *Client) CallStep(ctx context.Context, step idem.Step) (*mcp.CallToolResult, error) {
	p := &mcp.CallToolParams{Name: step.Tool}
	if len(step.Args) > 0 {
		p.Arguments = json.RawMessage(step.Args)
	}
	return c.CallTool(ctx, p, step.Key)
}

// CallTool calls the tool with key (from idem.KeyDeriver's Step or Effect, or
// a Journal's step), retrying as the Client's doc says. When it gives up
// it returns a *RetryError.
func (c *Client) CallTool(ctx context.Context, p *mcp.CallToolParams, key string) (*mcp.CallToolResult, error) {
	p = WithKey(p, key)
	maxAttempts := c.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxAttempts
	}
	maxElapsed := c.MaxElapsed
	if maxElapsed <= 0 {
		maxElapsed = DefaultMaxElapsed
	}
	clock := c.Clock
	if clock == nil {
		clock = idem.SystemClock()
	}
	deadline := clock.Now().Add(maxElapsed)
	giveUp := &RetryError{Tool: p.Name, Key: key}
	for attempt := 1; ; attempt++ {
		giveUp.Attempts = attempt
		res, err := c.attempt(ctx, p)
		var wait time.Duration
		switch status := Status(res); {
		case err == nil && status != StatusInProgress && status != StatusUnavailable && status != StatusRanTwice &&
			status != StatusTakenOver:
			return res, nil
		case err == nil:
			giveUp.Err, giveUp.Status = nil, status
			if s, ok := res.Meta[MetaRetryAfter].(float64); ok && s > 0 {
				wait = time.Duration(s * float64(time.Second))
			}
		case ctx.Err() != nil:
			giveUp.Err, giveUp.Reason = err, "canceled"
			return nil, giveUp
		case serverError(err):
			return nil, err // the server answered: a protocol error is no transport failure
		default:
			giveUp.Err, giveUp.Status = err, ""
		}
		if attempt >= maxAttempts {
			giveUp.Reason = "attempts"
			return nil, giveUp
		}
		if wait == 0 {
			wait = c.backoff(attempt)
		}
		if !clock.Now().Add(wait).Before(deadline) {
			giveUp.Reason = "deadline"
			return nil, giveUp
		}
		select {
		case <-ctx.Done():
			giveUp.Reason = "canceled"
			return nil, giveUp
		case <-clock.After(wait):
		}
	}
}

// attempt makes one call, connecting first if needed. A transport failure
// drops the session when the Client can connect another.
func (c *Client) attempt(ctx context.Context, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	sess, err := c.session(ctx)
	if err != nil {
		return nil, err
	}
	if c.AttemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.AttemptTimeout)
		defer cancel()
	}
	res, err := sess.CallTool(ctx, p)
	if err != nil && !serverError(err) && c.Connect != nil {
		c.mu.Lock()
		if c.cur == sess {
			c.cur, c.dropped = nil, true
		}
		c.mu.Unlock()
		_ = sess.Close()
	}
	return res, err
}

func (c *Client) session(ctx context.Context) (*mcp.ClientSession, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil {
		return c.cur, nil
	}
	if c.Session != nil && !c.dropped {
		c.cur = c.Session
		return c.cur, nil
	}
	if c.Connect == nil {
		return nil, errors.New("idemmcp: Client has neither Session nor Connect")
	}
	s, err := c.Connect(ctx)
	if err != nil {
		return nil, err
	}
	c.cur = s
	return s, nil
}

// codeRejected is the code of the SDK's "rejected by transport" error,
// which wraps failures of a call's HTTP request: the call may or may not
// have reached the server.
const codeRejected = -32005

// serverError reports whether err is a JSON-RPC error the server answered
// with, rather than a failure to get its answer.
func serverError(err error) bool {
	var wire *jsonrpc.Error
	return errors.As(err, &wire) && wire.Code != codeRejected
}

// backoff returns the wait before retry n (n ≥ 1): full jitter over an
// exponentially growing cap.
func (c *Client) backoff(n int) time.Duration {
	base, maxDelay := c.BaseDelay, c.MaxDelay
	if base <= 0 {
		base = DefaultBaseDelay
	}
	if maxDelay <= 0 {
		maxDelay = DefaultMaxDelay
	}
	ceiling := base
	for i := 1; i < n && ceiling < maxDelay; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, maxDelay)
	if c.Jitter != nil {
		return min(max(c.Jitter(ceiling), 0), ceiling)
	}
	return rand.N(ceiling + 1)
}

// Close closes the session the Client is using, if any: Session, or the
// last one Connect made. A later call connects again through Connect.
func (c *Client) Close() error {
	c.mu.Lock()
	s := c.cur
	c.cur, c.dropped = nil, true
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.Close()
}

// FirstRunAt returns, for a replayed result, when the call whose answer it
// is began to run (its _meta.idempotentFirstRunAt); ok is false for any
// other result.
func FirstRunAt(res *mcp.CallToolResult) (t time.Time, ok bool) {
	if res == nil {
		return time.Time{}, false
	}
	s, _ := res.Meta[MetaFirstRunAt].(string)
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}
