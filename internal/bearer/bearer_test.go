package bearer

import "testing"

// A set matches exactly its tokens, and a replaced set only the new ones.
func TestSet(t *testing.T) {
	s := NewSet(nil)
	if !s.Empty() || s.Match("") || s.Match("a") {
		t.Fatal("an empty set matched")
	}
	s.Replace([]string{"alpha", "beta"})
	if s.Empty() || !s.Match("alpha") || !s.Match("beta") || s.Match("alph") || s.Match("") {
		t.Fatal("a set of two tokens")
	}
	s.Replace([]string{"gamma"})
	if s.Match("alpha") || !s.Match("gamma") {
		t.Fatal("after Replace the old token still matched, or the new one did not")
	}
}
