package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem/idemadmin"
)

// idem admin serves idemadmin's page (and its JSON) for a store directory,
// behind an access token: the page settles claims and shows saved bodies,
// and every local process and every web page the operator's browser opens
// can reach 127.0.0.1.

func adminServeCommand(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	a := newAdminFlags("admin", "DIR [-addr HOST:PORT] [-write]", `
Serves the operator's page for a store directory: the records with stuck and
needing-attention claims first, each key's timeline with its saved result,
the stats with free space and the last 24 hours of activity, and forms to
settle a claim and to run a sweep (idemadmin.Handler, HTML under /ui/ and the
JSON views beside it).

Every request needs the access token printed at start: open the URL it
prints (its ?token= sets a cookie for the session, then leaves the address
bar), or send "Authorization: Bearer TOKEN". Without it every path answers
401. The token is new at every start.

The store is opened read-only, and the forms are refused, unless -write is
given; with -write, opening orphans the claims an earlier process left open
(they show as stuck), and a sweep runs without a resolver, as idem sweep
does. It holds the directory while it serves, so it cannot start while a
server holds the store: use that server's admin handler (idemadmin.Handler)
then. Stop it with Ctrl-C.`, stderr,
		"idem admin /var/lib/refund-tool/idem -write -addr 127.0.0.1:8765")
	a.fs.Lookup("json").Usage = "not used: the page is HTML, its JSON views are under the same address (hidden)"
	addr := a.fs.String("addr", "127.0.0.1:0", "listen on `host:port` (port 0: a free one); anything but loopback sends the token in clear")
	write := a.fs.Bool("write", false, "open the store for writing: allow settling claims and running sweeps")
	if _, err := a.parse(args, "DIR"); err != nil {
		return err
	}
	var decisions idemadmin.Decisions
	s, err := a.openStore(*write, &decisions)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := s.Close(); err == nil {
			err = cerr
		}
	}()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	token := newToken()
	mode := "read-only"
	if *write {
		mode = "read-write"
	}
	h := idemadmin.Handler(s, &idemadmin.HandlerOptions{Authorize: localAuthorizer(*write), Decisions: &decisions})
	port := ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: tokenGate(token, fmt.Sprintf("idem_admin_%d", port), h),
		ReadHeaderTimeout: 10 * time.Second}
	base := "http://" + ln.Addr().String() + "/"
	fmt.Fprintf(stdout, "idem admin: serving the store at %s (%s) on %s\n", a.dir, mode, base)
	fmt.Fprintf(stdout, "open: %s?token=%s\n", base, token)
	fmt.Fprintf(stdout, "or send: Authorization: Bearer %s\n", token)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newToken returns 128 random bits in hex.
func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// localAuthorizer is the Authorizer behind the token: whoever holds the
// token could read the store's directory, so reading, bodies and backups
// are theirs; settling and sweeping only with -write.
func localAuthorizer(write bool) idemadmin.Authorizer {
	return func(_ *http.Request, a idemadmin.Access) error {
		if (a == idemadmin.AccessSettle || a == idemadmin.AccessSweep) && !write {
			return errors.New("read-only: start idem admin with -write to " + a.String())
		}
		return nil
	}
}

// tokenGate lets through the requests that carry token: in the
// Authorization header as a bearer token, or in cookie (which a first
// visit with ?token= sets, before redirecting to the same address without
// it, so that the token leaves the address bar and the history). Every
// other request is refused with 401, whatever its path.
func tokenGate(token, cookie string, next http.Handler) http.Handler {
	ok := func(s string) bool { return subtle.ConstantTimeCompare([]byte(s), []byte(token)) == 1 }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Has("token") {
			if r.Method != http.MethodGet || !ok(q.Get("token")) {
				refuseToken(w)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: cookie, Value: token, Path: "/", HttpOnly: true,
				SameSite: http.SameSiteStrictMode})
			q.Del("token")
			u := *r.URL
			u.RawQuery = q.Encode()
			w.Header().Set("Referrer-Policy", "no-referrer")
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		if bearer, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found && ok(bearer) {
			next.ServeHTTP(w, r)
			return
		}
		if c, err := r.Cookie(cookie); err == nil && ok(c.Value) {
			next.ServeHTTP(w, r)
			return
		}
		refuseToken(w)
	})
}

func refuseToken(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, "idem admin: this needs the access token printed when idem admin started: open the address "+
		"it printed (with ?token=), or send Authorization: Bearer TOKEN", http.StatusUnauthorized)
}
