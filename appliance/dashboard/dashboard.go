package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed assets
var assets embed.FS

// Handler serves the dashboard: the page at "/" (and "/index.html") and its
// files under "/assets/". Any other path is 404, so the handler can sit
// under an API mux at "/" without hiding a mistyped API path behind the
// page. Responses say no-cache (a new binary's page is fetched at once) and
// carry a content security policy that allows only this origin.
func Handler() http.Handler {
	files := http.FileServerFS(assets)
	index, err := fs.ReadFile(assets, "assets/index.html")
	if err != nil {
		panic("dashboard: index.html not embedded: " + err.Error()) // broken build
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		switch p := r.URL.Path; {
		case p == "/" || p == "/index.html":
			h.Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusOK)
			if r.Method == http.MethodGet {
				_, _ = w.Write(index)
			}
		case strings.HasPrefix(p, "/assets/") && !strings.HasSuffix(p, "/") && p != "/assets/index.html":
			files.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}
