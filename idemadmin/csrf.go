package idemadmin

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
)

// The page's forms carry a CSRF token bound to a cookie (the double-submit
// pattern, signed): the first page sets a random cookie, each form holds
// the HMAC of that cookie under the handler's key, and a POST is accepted
// only when its form's token is the HMAC of the cookie it carries. Another
// site can make a browser send the cookie but can read neither the cookie
// nor a page, so it cannot write the token; a sibling site that can set
// cookies cannot sign one without the key. net/http's
// CrossOriginProtection refuses cross-origin POSTs before that.

// csrfCookie names the cookie that a page's CSRF tokens are bound to.
const csrfCookie = "idemadmin_csrf"

// csrfField names the forms' hidden field that holds the token.
const csrfField = "csrf"

// csrf signs and checks the forms' tokens.
type csrf struct {
	key []byte // written once by newCSRF, only read after
}

// newCSRF returns a csrf with key, or with a random key when key is empty.
func newCSRF(key []byte) *csrf {
	if len(key) == 0 {
		key = make([]byte, 32)
		_, _ = rand.Read(key) // crypto/rand.Read never fails
	}
	return &csrf{key: key}
}

// sign is the token for cookie value v.
func (c *csrf) sign(v string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte("idemadmin csrf\x00" + v))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// token returns the token for r's forms, setting the cookie it is bound
// to when r carries none.
func (c *csrf) token(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(csrfCookie); err == nil && len(ck.Value) >= 32 {
		return c.sign(ck.Value)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	v := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return c.sign(v)
}

// check reports whether the posted form of r carries the token of the
// cookie r carries. r's form must have been parsed.
func (c *csrf) check(r *http.Request) bool {
	ck, err := r.Cookie(csrfCookie)
	if err != nil || len(ck.Value) < 32 {
		return false
	}
	got := r.PostForm.Get(csrfField)
	return got != "" && hmac.Equal([]byte(got), []byte(c.sign(ck.Value)))
}
