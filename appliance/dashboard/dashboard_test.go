package dashboard

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	for _, tc := range []struct {
		method, path string
		status       int
		contentType  string // prefix
		contains     string
	}{
		{"GET", "/", 200, "text/html", `<main id="main">`},
		{"GET", "/index.html", 200, "text/html", `assets/js/app.js`},
		{"HEAD", "/", 200, "text/html", ""},
		{"GET", "/assets/style.css", 200, "text/css", "table.stack"},
		{"GET", "/assets/js/app.js", 200, "text/javascript", "hashchange"},
		{"GET", "/assets/js/api.js", 200, "text/javascript", "api/settings"},
		{"GET", "/assets/js/bridges.js", 200, "text/javascript", "api/bridges"},
		{"GET", "/assets/js/cluster.js", 200, "text/javascript", "written next"},
		{"GET", "/assets/", 404, "", ""},    // no listings
		{"GET", "/assets/js/", 404, "", ""}, // no listings
		{"GET", "/assets/index.html", 404, "", ""},
		{"GET", "/assets/nope.js", 404, "", ""},
		{"GET", "/api/nope", 404, "", ""}, // a mistyped API path is not the page
		{"GET", "/favicon.ico", 404, "", ""},
		{"POST", "/", 405, "", ""},
	} {
		req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.status {
			t.Errorf("%s %s: status %d, want %d", tc.method, tc.path, res.StatusCode, tc.status)
			continue
		}
		if tc.status != 200 {
			continue
		}
		if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, tc.contentType) {
			t.Errorf("%s %s: Content-Type %q, want %s", tc.method, tc.path, ct, tc.contentType)
		}
		if !strings.Contains(string(body), tc.contains) {
			t.Errorf("%s %s: body lacks %q", tc.method, tc.path, tc.contains)
		}
		for _, h := range []string{"Content-Security-Policy", "Cache-Control", "X-Content-Type-Options"} {
			if res.Header.Get(h) == "" {
				t.Errorf("%s %s: no %s header", tc.method, tc.path, h)
			}
		}
	}
}

// TestAssetsSelfContained: the page loads nothing from another origin and
// every module it imports is embedded.
func TestAssetsSelfContained(t *testing.T) {
	entries, err := assets.ReadDir("assets/js")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, e := range entries {
		have[e.Name()] = true
	}
	for _, name := range []string{"assets/index.html", "assets/style.css"} {
		b, err := assets.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "http://") || strings.Contains(string(b), "https://") {
			t.Errorf("%s refers to another origin", name)
		}
	}
	for name := range have {
		b, err := assets.ReadFile("assets/js/" + name)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "import ") {
				continue
			}
			_, from, ok := strings.Cut(line, " from './")
			if !ok {
				t.Errorf("%s: import not relative: %s", name, line)
				continue
			}
			mod, _, _ := strings.Cut(from, "'")
			if !have[mod] {
				t.Errorf("%s imports %s, which is not embedded", name, mod)
			}
		}
	}
}
