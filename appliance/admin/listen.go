package admin

import (
	"net"
	"net/http"

	"golang.org/x/net/netutil"
)

// HTTPServer is an http.Server for Handler with the Options' timeouts and
// header limit, speaking HTTP/1.1 only (over TLS too), so that a
// connection carries one request at a time and MaxConnections bounds the
// requests in progress as well. The caller sets what belongs to the
// process (BaseContext, ErrorLog, TLSConfig) and serves it on Listener.
func (s *Server) HTTPServer() *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	return &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		WriteTimeout:      s.opts.WriteTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    s.opts.MaxHeaderBytes,
		Protocols:         &protocols,
	}
}

// Listener wraps ln so that at most Options.MaxConnections of its
// connections are open at once: Accept waits for one to close before it
// takes the next from the kernel's queue.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return netutil.LimitListener(ln, s.opts.MaxConnections)
}
