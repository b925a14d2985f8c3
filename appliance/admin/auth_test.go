package admin

import (
	"net/http"
	"strings"
	"testing"
)

// TestAuthTokensOfDifferentLengths: tokens of very different lengths are
// each accepted, and a request whose token is one of them cut short, one
// byte longer, or of the same length with its last byte changed is
// refused; the comparison runs over fixed-size digests, so none of those
// answers depends on how long the token is.
func TestAuthTokensOfDifferentLengths(t *testing.T) {
	tokens := []string{"a", "s3cret-" + strings.Repeat("x", 25), strings.Repeat("long", 16383) + "end"} // 1, 32 and 65535 bytes
	f := newFixture(t, Options{Tokens: tokens})
	for _, tok := range tokens {
		f.token = tok
		f.do("GET", "/api/queues", nil).want(t, http.StatusOK, nil)
		changed := []byte(tok)
		changed[len(changed)-1] ^= 1
		for _, wrong := range []string{tok[:len(tok)-1], tok + "x", string(changed), tok + tokens[0]} {
			if wrong == "" {
				continue // no token at all: covered by TestAuth
			}
			f.token = wrong
			f.do("GET", "/api/queues", nil).wantError(t, http.StatusUnauthorized, "unauthorized")
		}
	}
}
