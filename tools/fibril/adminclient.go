package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// adminClient calls fibrild's admin HTTP API (docs/admin-api.md).
type adminClient struct {
	base  string // e.g. http://127.0.0.1:7421, no trailing slash
	token string
	http  *http.Client
}

// adminClient is the client of the --admin URL: http:// (the default when
// the URL names no scheme) or https://, checked against the system's
// roots or, with --admin-ca, against that CA alone.
func (c *connFlags) adminClient() (*adminClient, error) {
	base := strings.TrimRight(c.admin, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, usagef("--admin %q: %v", c.admin, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, usagef("--admin %q: the scheme is http:// or https://", c.admin)
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	if c.adminCA != "" {
		if u.Scheme != "https" {
			return nil, usagef("--admin-ca %s is for an https:// --admin, not %s", c.adminCA, base)
		}
		pem, err := os.ReadFile(c.adminCA)
		if err != nil {
			return nil, fmt.Errorf("--admin-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--admin-ca %s: no PEM certificate in it", c.adminCA)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		hc.Transport = tr
	}
	return &adminClient{base: base, token: c.token, http: hc}, nil
}

// apiError is the admin API's error body, {"error": ..., "code": ...},
// with the HTTP status.
type apiError struct {
	Status  int    `json:"-"`
	Message string `json:"error"`
	Code    string `json:"code"`
}

func (e *apiError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.Code != "" {
		return fmt.Sprintf("%s (%s)", msg, e.Code)
	}
	return msg
}

// do sends a request with a JSON body (if in is not nil) and decodes a
// JSON answer into out (if not nil). HTTP errors become *apiError wrapped
// in an exitError with the status's exit code.
func (a *adminClient) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach fibrild's admin API at %s: is fibrild running with the admin API on? start it with `make run` or `systemctl start fibril`, or point --admin (env %s) at it: %w",
			a.base, envAdmin, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		return statusError(resp.StatusCode, data)
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// statusError turns an error answer into an error with the exit status
// and advice the status calls for.
func statusError(status int, body []byte) error {
	e := &apiError{Status: status}
	if json.Unmarshal(body, e) != nil || e.Message == "" {
		e.Message = strings.TrimSpace(string(body))
	}
	switch status {
	case http.StatusNotFound:
		return withExit(exitNotFound, e)
	case http.StatusConflict:
		return withExit(exitConflict, e)
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("%w: pass --token or set %s", e, envToken)
	case http.StatusBadRequest:
		return fmt.Errorf("fibrild refused the request: %w", e)
	}
	return e
}

// isAPIStatus reports whether err is an admin API answer with status.
func isAPIStatus(err error, status int) bool {
	var e *apiError
	return errors.As(err, &e) && e.Status == status
}
