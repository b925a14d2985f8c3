package admin

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// guard refuses, before any route sees them, the requests a browser can
// be made to send on an attacker's behalf:
//
//   - DNS rebinding: a page on a name the attacker controls, re-pointed
//     at this box, reaches the listener with its own name in Host. Only
//     the listener's own names are served: localhost, any IP literal (a
//     rebinding needs a name), and Options.Hosts. The port is ignored.
//   - Cross-site requests: a page on another origin can POST to the API
//     without reading the answer (a "simple" request needs no CORS
//     preflight), which is enough to declare, publish or ack. A request
//     other than GET, HEAD or OPTIONS is refused when the browser says it
//     comes from another site (Sec-Fetch-Site: cross-site or same-site) or
//     its Origin is not the host:port it was sent to. Requests with
//     neither header (curl, the fibril CLI, Prometheus) are not browsers'
//     and pass; the same-origin dashboard passes.
//
// Both apply whether or not tokens are set: a token kept by the dashboard
// would not stop them, and without tokens nothing else would. No CORS
// header is ever sent, so other origins cannot read answers either.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if host := hostOnly(r.Host); !s.ownHost(host) {
			writeJSON(w, http.StatusMisdirectedRequest, errorBody{
				Error: fmt.Sprintf("Host %q is not a name of this admin listener: reach it by localhost, an IP address, "+
					"or a name listed in [admin] hosts", r.Host),
				Code: "unknown_host",
			})
			return
		}
		if err := crossOrigin(r); err != nil {
			writeJSON(w, http.StatusForbidden, errorBody{Error: err.Error(), Code: "cross_origin"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ownHost reports whether host (without its port) names this listener.
// An empty host (an HTTP/1.0 request without Host, which no browser
// sends) passes.
func (s *Server) ownHost(host string) bool {
	if host == "" || host == "localhost" {
		return true
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	_, ok := s.hosts[host]
	return ok
}

// crossOrigin says why r, a request that changes state, is refused as
// coming from a page of another origin; nil when it is not.
func crossOrigin(r *http.Request) error {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "cross-site", "same-site":
		return fmt.Errorf("%s %s refused: the browser sent it from a page of another site (Sec-Fetch-Site: %s); "+
			"the admin API takes changes from its own dashboard and from non-browser clients only", r.Method, r.URL.Path, site)
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	if u, err := url.Parse(origin); err == nil && u.Host != "" &&
		strings.EqualFold(withoutDefaultPort(u.Host, u.Scheme), withoutDefaultPort(r.Host, requestScheme(r))) {
		return nil
	}
	return fmt.Errorf("%s %s refused: it comes from a page of origin %q, not from this listener (%s); "+
		"the admin API takes changes from its own dashboard and from non-browser clients only", r.Method, r.URL.Path, origin, r.Host)
}

// hostOnly is a Host header's host without its port or IPv6 brackets,
// lower case and without a final dot.
func hostOnly(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	return normalHost(host)
}

// normalHost is a host name as the check compares it.
func normalHost(host string) string {
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// withoutDefaultPort drops the scheme's default port from host:port, as
// browsers do in Origin and Host.
func withoutDefaultPort(hostport, scheme string) string {
	if h, port, err := net.SplitHostPort(hostport); err == nil &&
		(scheme == "http" && port == "80" || scheme == "https" && port == "443") {
		if strings.Contains(h, ":") {
			return "[" + h + "]"
		}
		return h
	}
	return hostport
}

func requestScheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}
