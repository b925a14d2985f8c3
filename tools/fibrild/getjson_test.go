package main

import (
	"encoding/json"
	"net/http"
	"testing"
)

// getJSON decodes GET url's answer into v, failing the test unless the
// answer is a 200 with a body that decodes.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d: %v", url, resp.StatusCode, err)
	}
}
