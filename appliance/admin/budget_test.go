package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
)

// Publish bodies share one budget over every connection: while one
// publish holds all of it, another waits and is then refused as busy;
// once the first is answered the budget is whole again.
func TestPublishBudgetBoundsBodiesInFlight(t *testing.T) {
	body := `{"body":"` + strings.Repeat("x", 64<<10) + `"}`
	f := newFixture(t, Options{PublishBytesInFlight: int64(len(body))})
	f.srv.publishes.wait = 200 * time.Millisecond
	ctx := testCtx(t)
	if _, err := f.b.Declare(ctx, appliance.QueueConfig{Name: "q"}); err != nil {
		t.Fatal(err)
	}

	// The first publish takes the whole budget and is held reading its body.
	pr, pw := io.Pipe()
	req := httptest.NewRequestWithContext(ctx, "POST", "http://"+testHost+"/api/queues/q/messages", pr)
	req.ContentLength = int64(len(body))
	first := httptest.NewRecorder()
	served := make(chan struct{})
	go func() { defer close(served); f.srv.Handler().ServeHTTP(first, req) }()
	if _, err := pw.Write([]byte(body[:1])); err != nil { // read: the handler holds its budget
		t.Fatal(err)
	}

	f.do("POST", "/api/queues/q/messages", map[string]string{"body": "small"}).wantError(t, http.StatusServiceUnavailable, "busy")

	if _, err := pw.Write([]byte(body[1:])); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	<-served
	if first.Code != http.StatusOK {
		t.Fatalf("the publish holding the budget: status %d, body %s", first.Code, first.Body)
	}
	f.do("POST", "/api/queues/q/messages", map[string]string{"body": "small"}).want(t, http.StatusOK, nil)
}
