package bridge

import (
	"strings"
	"testing"
)

// FuzzSubjectMapping maps arbitrary subjects through arbitrary patterns
// and queue templates, the parts of a bridge that read outside text (the
// config, and every subject a NATS publisher picks). Nothing may panic; a
// pattern that validates matches only subjects with as many tokens as it
// needs, a literal template always names itself, and a mapped queue name
// is made only of the template's literals and the subject's own tokens.
func FuzzSubjectMapping(f *testing.F) {
	f.Add("sensors.*.temp", "temp-{1}", "sensors.k7.temp")
	f.Add("*.*", "{2}-{1}", "a.b")
	f.Add("logs.>", "logs-{1}", "logs.a.b")
	f.Add("logs.>", "all", "logs.x")
	f.Add("a.*", "{1}{1}{", "a.b")
	f.Fuzz(func(t *testing.T, pattern, tmpl, subject string) {
		if validSubject(pattern, true) != nil {
			return
		}
		tm, err := parseTemplate(tmpl, wildcardCount(pattern))
		if err != nil {
			return
		}
		in := Ingest{Subject: pattern, tmpl: tm}
		got := in.queueFor(subject)
		if tm.fixed() {
			if got != tmpl {
				t.Fatalf("literal template %q mapped %q to %q", tmpl, subject, got)
			}
			return
		}
		caps, ok := matchSubject(pattern, subject)
		if !ok {
			if got != "" {
				t.Fatalf("%q does not match %q but mapped to %q", subject, pattern, got)
			}
			return
		}
		if len(caps) != wildcardCount(pattern) {
			t.Fatalf("%q matching %q captured %d tokens for %d wildcards", subject, pattern, len(caps), wildcardCount(pattern))
		}
		for _, c := range caps {
			if !strings.Contains(subject, c) {
				t.Fatalf("capture %q is not part of subject %q", c, subject)
			}
		}
		if got != tm.expand(caps) {
			t.Fatalf("queueFor(%q) = %q, expand = %q", subject, got, tm.expand(caps))
		}
	})
}
