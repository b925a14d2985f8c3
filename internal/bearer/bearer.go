// Package bearer holds the tokens a port accepts: the client protocol's
// Hello token and the admin API's bearer token are the same set. Tokens
// are kept and compared as SHA-256 digests, so every comparison runs over
// 32 bytes whatever a token's length (a plain constant-time compare
// returns at once on a length mismatch, which would time the length), and
// every token is compared, so the time does not say which one matched.
package bearer

import (
	"crypto/sha256"
	"crypto/subtle"
	"sync/atomic"
)

// Set is a set of accepted tokens. Replace swaps it whole, for a reload;
// connections and requests check the set in effect when they arrive. Safe
// for concurrent use.
type Set struct {
	digests atomic.Pointer[[][sha256.Size]byte]
}

// NewSet returns the set of tokens.
func NewSet(tokens []string) *Set {
	s := &Set{}
	s.Replace(tokens)
	return s
}

// Replace makes tokens the accepted set.
func (s *Set) Replace(tokens []string) {
	d := make([][sha256.Size]byte, len(tokens))
	for i, t := range tokens {
		d[i] = sha256.Sum256([]byte(t))
	}
	s.digests.Store(&d)
}

// Empty reports whether no token is set: the port asks for none.
func (s *Set) Empty() bool { return len(*s.digests.Load()) == 0 }

// Match reports whether token is one of the set, in constant time.
func (s *Set) Match(token string) bool {
	got := sha256.Sum256([]byte(token))
	match := 0
	for _, d := range *s.digests.Load() {
		match |= subtle.ConstantTimeCompare(got[:], d[:])
	}
	return match == 1
}
