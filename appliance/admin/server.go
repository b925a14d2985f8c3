package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/internal/bearer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Request body limits: a publish carries one message (base64 grows it by a
// third); everything else is a small JSON object.
const (
	maxMessageRequest = 16 << 20
	maxRequest        = 1 << 20
)

// Server is the admin HTTP API over one broker.
type Server struct {
	b       *appliance.Broker
	opts    Options
	log     *slog.Logger
	tokens  *bearer.Set         // Options.Tokens, until SetTokens replaces them
	hosts   map[string]struct{} // Options.Hosts, normalised
	reg     *prometheus.Registry
	handler http.Handler
	// publishes bounds the publish bodies held at once (budget.go).
	publishes *publishBudget
	history   *history // the queues' recent figures (history.go)
}

// New builds the admin API for b. Serve it with Handler.
func New(b *appliance.Broker, opts Options) (*Server, error) {
	if b == nil {
		return nil, errors.New("admin: no broker")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	s := &Server{b: b, opts: opts, log: opts.Logger, hosts: make(map[string]struct{}),
		publishes: newPublishBudget(opts.PublishBytesInFlight), history: newHistory(opts.HistorySamples)}
	for _, h := range opts.Hosts {
		s.hosts[normalHost(h)] = struct{}{}
	}
	s.tokens = bearer.NewSet(opts.Tokens)
	s.reg = prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		opts.Metrics,
		newStateCollector(b, opts.Metrics),
		bridgeCollector{stats: opts.Bridges},
		serverCollector{stats: opts.ServerStats},
		buildInfo(opts.Version),
	} {
		if err := s.reg.Register(c); err != nil {
			return nil, fmt.Errorf("admin: register metrics: %w", err)
		}
	}
	for _, c := range opts.Collectors {
		if err := s.reg.Register(c); err != nil {
			return nil, fmt.Errorf("admin: register metrics: %w", err)
		}
	}
	if opts.Cluster != nil {
		if err := s.reg.Register(clusterCollector{view: opts.Cluster}); err != nil {
			return nil, fmt.Errorf("admin: register metrics: %w", err)
		}
	}
	if opts.ServerConnections != nil {
		conns := opts.ServerConnections
		g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fibril_connections", Help: "Open client connections to the wire server.",
		}, func() float64 { return float64(conns()) })
		if err := s.reg.Register(g); err != nil {
			return nil, fmt.Errorf("admin: register metrics: %w", err)
		}
	}
	if opts.ServerRefused != nil {
		refused := opts.ServerRefused
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "fibril_connections_refused_total", Help: "Client connections refused at the server's max_connections limit.",
		}, func() float64 { return float64(refused()) })
		if err := s.reg.Register(c); err != nil {
			return nil, fmt.Errorf("admin: register metrics: %w", err)
		}
	}
	s.handler = s.routes()
	return s, nil
}

// buildInfo is fibril_build_info: always 1, its labels the broker's
// version and the Go release that built it.
func buildInfo(version string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "fibril_build_info",
		Help:        "Always 1; the labels name the broker's version and the Go release that built it.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()}})
	g.Set(1)
	return g
}

// Handler serves the API, the probes, /metrics and the UI.
func (s *Server) Handler() http.Handler { return s.handler }

// Registry is the private registry behind /metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	api := func(pattern string, h apiFunc) { mux.Handle(pattern, s.auth(s.jsonAPI(h))) }
	api("GET /api/queues", s.listQueues)
	api("POST /api/queues", s.declareQueue)
	api("GET /api/queues/{name}", s.getQueue)
	api("DELETE /api/queues/{name}", s.deleteQueue)
	api("POST /api/queues/{name}/purge", s.purgeQueue)
	api("POST /api/queues/{name}/mode", s.setMode)
	api("GET /api/queues/{name}/history", s.getQueueHistory)
	api("GET /api/history", s.getHistory)
	api("POST /api/queues/{name}/messages", s.publishes.wrap(s.publish))
	api("POST /api/queues/{name}/get", s.get)
	api("GET /api/settings", s.getSettings)
	api("PUT /api/settings", s.putSettings)
	api("GET /api/node", s.getNode)
	api("GET /api/bridges", s.getBridges)
	api("GET /api/uplinks", s.getUplinks)
	api("GET /api/connections", s.getConnections)
	api("GET /api/cluster", s.getCluster)
	api("POST /api/cluster/join", s.joinCluster)
	api("GET /api/cluster/settings", s.getClusterSettings)
	api("PUT /api/cluster/settings", s.putClusterSettings)
	mux.Handle("GET /healthz", s.jsonAPI(s.healthz))
	mux.Handle("GET /readyz", s.jsonAPI(s.readyz))
	mux.Handle("GET /metrics", s.auth(promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelError),
	})))
	if s.opts.UI != nil {
		mux.Handle("/", s.opts.UI)
	}
	return s.guard(mux)
}

// apiFunc is the shape of every JSON handler: a value to write with its
// status (0 means 200), or an error to map.
type apiFunc func(r *http.Request) (int, any, error)

// jsonAPI is the one decorator: it writes what h returns as JSON.
func (s *Server) jsonAPI(h apiFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, v, err := h(r)
		if err != nil {
			status, code, details := StatusOf(err)
			if status >= 500 {
				s.log.Warn("admin request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
			}
			v = errorBody{Error: err.Error(), Code: code, Details: details}
			writeJSON(w, status, v)
			return
		}
		if status == 0 {
			status = http.StatusOK
		}
		writeJSON(w, status, v)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client may be gone; nothing to do about it
}

// auth checks the bearer token when tokens are configured (checked at
// each request: SetTokens may add or remove them).
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.tokens.Empty() || s.authorized(r) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="fibril"`)
		writeJSON(w, http.StatusUnauthorized, errorBody{
			Error: "missing or unknown token: send Authorization: Bearer <token> with a [server] token",
			Code:  "unauthorized",
		})
	})
}

// authorized reports whether r carries one of the tokens, compared in
// constant time (package bearer).
func (s *Server) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return s.tokens.Match(strings.TrimSpace(tok))
}

// SetTokens replaces the accepted bearer tokens (a reload); the next
// request is checked against the new set, and with none the API asks for
// no token. An empty token is refused, as in Options.
func (s *Server) SetTokens(tokens []string) error {
	for _, t := range tokens {
		if t == "" {
			return errEmptyToken
		}
	}
	s.tokens.Replace(tokens)
	return nil
}

// decode reads a JSON body of at most limit bytes into v, refusing
// unknown fields. An empty body leaves v as it is.
func decode(r *http.Request, limit int64, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &Error{Status: http.StatusRequestEntityTooLarge, Code: "too_large",
				Err: fmt.Errorf("request body over %d bytes", limit)}
		}
		return invalid("read request body: %v", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalid("request body: %v", err)
	}
	if dec.More() {
		return invalid("request body: more than one JSON value")
	}
	return nil
}

// getUplinks answers GET /api/uplinks: the uplinks' own report.
func (s *Server) getUplinks(*http.Request) (int, any, error) {
	if s.opts.Uplinks == nil {
		return http.StatusOK, map[string]any{"uplinks": []any{}}, nil
	}
	return http.StatusOK, map[string]any{"uplinks": s.opts.Uplinks()}, nil
}

// getConnections answers GET /api/connections: the client connections
// and each one's subscriptions, as the wire server reports them.
func (s *Server) getConnections(*http.Request) (int, any, error) {
	if s.opts.Sessions == nil {
		return http.StatusOK, map[string]any{"connections": []any{}}, nil
	}
	return http.StatusOK, map[string]any{"connections": s.opts.Sessions()}, nil
}

// getBridges answers GET /api/bridges: the bridges' own report.
func (s *Server) getBridges(*http.Request) (int, any, error) {
	if s.opts.Bridges == nil {
		return http.StatusOK, map[string]any{"bridges": []any{}}, nil
	}
	return http.StatusOK, map[string]any{"bridges": s.opts.Bridges()}, nil
}
