package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/client"
)

// Two dozen concurrent admin publishes of 16 MiB of JSON each (the most a
// request may carry; their 12 MB bodies are over the 4 MiB message limit,
// which is found only once a body is read and decoded) hold fibrild's
// memory to its publish budget plus the copies decoding takes, not two
// dozen times that: before the budget 24 such uploads grew RSS by 1.3 GB.
// Each is refused as too large, or as busy after waiting for the budget,
// and a valid publish goes through afterwards.
func TestAdminUploadsStayWithinTheBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("runs fibrild and uploads about 300 MB")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	p := startSolo(t)
	c := dialClient(t, ctx, p)
	if _, err := c.DeclareQueue(ctx, client.Queue("uploads").Buffered()); err != nil {
		t.Fatal(err)
	}
	before, err := p.Usage()
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"body_base64":"` + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xa5}, 12_000_000)) + `"}`)
	const uploads = 24
	var wg sync.WaitGroup
	codes := make([]int, uploads)
	start := make(chan struct{})
	for i := range uploads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req, err := http.NewRequestWithContext(ctx, "POST", p.Admin+"/api/queues/uploads/messages", bytes.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("upload %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			codes[i] = resp.StatusCode
			if resp.StatusCode != http.StatusRequestEntityTooLarge && resp.StatusCode != http.StatusServiceUnavailable {
				var b bytes.Buffer
				_, _ = b.ReadFrom(resp.Body)
				t.Errorf("upload %d: status %d: %s", i, resp.StatusCode, b.String())
			}
		}()
	}
	close(start)
	wg.Wait()
	after, err := p.Usage()
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for _, code := range codes {
		if code == http.StatusRequestEntityTooLarge {
			read++
		}
	}
	grew := after.PeakRSS - before.RSS
	t.Logf("%d of %d uploads read and refused as too large, the rest busy; peak RSS grew %d MiB", read, uploads, grew>>20)
	if read < 4 {
		t.Fatalf("only %d of %d uploads were read", read, uploads)
	}
	if grew > 700<<20 { // 301 MiB measured with the budget, 1410 without
		t.Fatalf("peak RSS grew %d MiB under %d concurrent uploads; the 64 MiB publish budget should hold it far lower\n%s",
			grew>>20, uploads, strings.TrimSpace(p.Log()))
	}
	resp, err := http.Post(p.Admin+"/api/queues/uploads/messages", "application/json", strings.NewReader(`{"body":"valid"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a valid publish after the uploads: status %d", resp.StatusCode)
	}
}
