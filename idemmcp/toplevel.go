package idemmcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxLiftBytes bounds the HTTP bodies TopLevelKeysHTTP looks into; larger
// ones pass through as they are.
const maxLiftBytes = 4 << 20

// TopLevelKeys wraps a server transport (stdio, in-memory, a command's
// pipes) so that a tools/call sending its key in the SEP-3182 shape, as
// params.idempotencyKey, is read as if it were params._meta.idempotencyKey.
// The SDK drops unknown members of params before any handler or middleware
// sees them, so the key must be moved on the way in. The same key in _meta
// is one key; another key there makes the call an invalid-params error, as
// two different keys under any two names do.
func TopLevelKeys(t mcp.Transport) mcp.Transport { return liftTransport{t} }

type liftTransport struct{ t mcp.Transport }

func (l liftTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := l.t.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return liftConn{c}, nil
}

type liftConn struct{ mcp.Connection }

func (c liftConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if r, ok := m.(*jsonrpc.Request); ok && r.Method == "tools/call" {
		r.Params = liftParams(r.Params)
	}
	return m, err
}

// TopLevelKeysHTTP does for a streamable HTTP handler (such as
// mcp.NewStreamableHTTPHandler's) what TopLevelKeys does for a transport:
// it moves a top-level params.idempotencyKey of each tools/call in a POST
// body into params._meta.
func TopLevelKeysHTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxLiftBytes+1))
		if err != nil || len(body) > maxLiftBytes {
			// Hand on what was read and the rest unchanged.
			r.Body = readCloser{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
			h.ServeHTTP(w, r)
			return
		}
		_ = r.Body.Close()
		body = liftBody(body)
		r2 := r.Clone(r.Context())
		r2.Body = io.NopCloser(bytes.NewReader(body))
		r2.ContentLength = int64(len(body))
		h.ServeHTTP(w, r2)
	})
}

type readCloser struct {
	io.Reader
	io.Closer
}

// liftBody rewrites one JSON-RPC message or a batch of them.
func liftBody(body []byte) []byte {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var batch []json.RawMessage
		if json.Unmarshal(trimmed, &batch) != nil {
			return body
		}
		for i, m := range batch {
			batch[i] = liftMessage(m)
		}
		out, err := json.Marshal(batch)
		if err != nil {
			return body
		}
		return out
	}
	return liftMessage(body)
}

func liftMessage(msg []byte) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(msg, &m) != nil {
		return msg
	}
	var method string
	if json.Unmarshal(m["method"], &method) != nil || method != "tools/call" {
		return msg
	}
	params := liftParams(m["params"])
	if bytes.Equal(params, m["params"]) {
		return msg
	}
	m["params"] = params
	out, err := json.Marshal(m)
	if err != nil {
		return msg
	}
	return out
}

// liftParams moves params.idempotencyKey into params._meta. When _meta
// has another key already, the top-level one goes under metaTopLevelKey,
// so that keyOf refuses the call for its two keys rather than pick one.
// Params that are not an object come back unchanged.
func liftParams(raw json.RawMessage) json.RawMessage {
	var p map[string]json.RawMessage
	if json.Unmarshal(raw, &p) != nil {
		return raw
	}
	key, ok := p[MetaKey]
	if !ok {
		return raw
	}
	delete(p, MetaKey)
	meta := map[string]json.RawMessage{}
	if m, ok := p["_meta"]; ok && json.Unmarshal(m, &meta) != nil {
		return raw
	}
	switch had, ok := meta[MetaKey]; {
	case !ok:
		meta[MetaKey] = key
	case !sameJSONString(had, key):
		meta[metaTopLevelKey] = key
	}
	mb, err := json.Marshal(meta)
	if err != nil {
		return raw
	}
	p["_meta"] = mb
	out, err := json.Marshal(p)
	if err != nil {
		return raw
	}
	return out
}

// sameJSONString reports whether two JSON values are the same string
// (escape forms aside).
func sameJSONString(a, b json.RawMessage) bool {
	var x, y string
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && x == y
}
