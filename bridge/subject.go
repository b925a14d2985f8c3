package bridge

import (
	"fmt"
	"strconv"
	"strings"
)

// A subject pattern is a NATS subject whose tokens (separated by '.') may be
// '*' (exactly one token) or, as the last token only, '>' (one or more
// tokens).

// validSubject checks a NATS subject or subject pattern. With wildcards
// false, '*' and '>' are refused (a subject to publish to).
func validSubject(s string, wildcards bool) error {
	if s == "" {
		return fmt.Errorf("empty subject")
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return fmt.Errorf("subject %q: contains white space", s)
	}
	toks := strings.Split(s, ".")
	for i, tok := range toks {
		switch {
		case tok == "":
			return fmt.Errorf("subject %q: empty token", s)
		case tok == "*" || tok == ">":
			if !wildcards {
				return fmt.Errorf("subject %q: wildcards are not allowed here", s)
			}
			if tok == ">" && i != len(toks)-1 {
				return fmt.Errorf("subject %q: '>' must be the last token", s)
			}
		case strings.ContainsAny(tok, "*>"):
			return fmt.Errorf("subject %q: token %q mixes a wildcard with other characters", s, tok)
		}
	}
	return nil
}

// wildcardCount is how many wildcard tokens a valid pattern has.
func wildcardCount(pattern string) int {
	n := 0
	for _, tok := range strings.Split(pattern, ".") {
		if tok == "*" || tok == ">" {
			n++
		}
	}
	return n
}

// matchSubject reports whether subject matches pattern and returns the
// tokens the wildcards stood for, in order ('>' captures the rest of the
// subject, dots included).
func matchSubject(pattern, subject string) ([]string, bool) {
	pt := strings.Split(pattern, ".")
	st := strings.Split(subject, ".")
	var caps []string
	for i, p := range pt {
		if p == ">" {
			if i >= len(st) {
				return nil, false
			}
			return append(caps, strings.Join(st[i:], ".")), true
		}
		if i >= len(st) {
			return nil, false
		}
		switch p {
		case "*":
			caps = append(caps, st[i])
		default:
			if p != st[i] {
				return nil, false
			}
		}
	}
	if len(st) != len(pt) {
		return nil, false
	}
	return caps, true
}

// template is a parsed queue-name template: literal text with {N}
// placeholders, N counting the subject pattern's wildcards from 1.
type template struct {
	parts []templatePart
}

type templatePart struct {
	literal string
	capture int // 1-based wildcard index; 0 for a literal
}

// parseTemplate parses tmpl for a pattern with wildcards wildcard tokens.
func parseTemplate(tmpl string, wildcards int) (template, error) {
	if tmpl == "" {
		return template{}, fmt.Errorf("empty queue template")
	}
	var t template
	rest := tmpl
	for rest != "" {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			t.parts = append(t.parts, templatePart{literal: rest})
			break
		}
		if rest[open] == '}' {
			return template{}, fmt.Errorf("queue template %q: '}' without '{'", tmpl)
		}
		if open > 0 {
			t.parts = append(t.parts, templatePart{literal: rest[:open]})
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return template{}, fmt.Errorf("queue template %q: '{' without '}'", tmpl)
		}
		num := rest[open+1 : open+end]
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 {
			return template{}, fmt.Errorf("queue template %q: {%s} is not a wildcard number (from 1)", tmpl, num)
		}
		if n > wildcards {
			return template{}, fmt.Errorf("queue template %q: {%d} but the subject has %d wildcard(s)", tmpl, n, wildcards)
		}
		t.parts = append(t.parts, templatePart{capture: n})
		rest = rest[open+end+1:]
	}
	return t, nil
}

// expand fills the template with the wildcard captures of one subject.
func (t template) expand(caps []string) string {
	var b strings.Builder
	for _, p := range t.parts {
		if p.capture > 0 {
			b.WriteString(caps[p.capture-1])
		} else {
			b.WriteString(p.literal)
		}
	}
	return b.String()
}

// fixed reports whether the template names one queue whatever the subject.
func (t template) fixed() bool {
	for _, p := range t.parts {
		if p.capture > 0 {
			return false
		}
	}
	return true
}
