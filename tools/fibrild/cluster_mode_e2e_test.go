package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/fibril-edge/fibril/appliance/client"
)

// A buffered queue on three fibrild changes to durable through the admin
// API of a node that does not own it, and back to buffered through the
// client protocol of another: each answer states the mode in effect, and
// every confirm through any node states the mode it was given under.
func TestClusterModeChangeProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs three fibrild processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := startClusterProcs(t, ctx)
	c1 := cp.dial(t, ctx, "n1")
	if _, err := c1.DeclareQueue(ctx, client.Queue("modes").Buffered()); err != nil {
		t.Fatal(err)
	}
	var v admin.ClusterView
	waitView(t, ctx, cp.procs["n1"].Admin, &v, func() bool { return ownerOf(v, "modes") != "" })
	owner := ownerOf(v, "modes")
	var others []string
	for _, id := range cp.ids {
		if id != owner {
			others = append(others, id)
		}
	}
	publishAll := func(via string, want client.Durability, n int) {
		t.Helper()
		c := cp.dial(t, ctx, via)
		for i := range n {
			cf, err := c.Publish(ctx, "modes", client.Message{Body: fmt.Appendf(nil, "%s-%d", via, i)})
			if err != nil {
				t.Fatalf("publish through %s: %v", via, err)
			}
			if cf.Durability != want {
				t.Fatalf("a confirm through %s states %v, want %v", via, cf.Durability, want)
			}
		}
	}
	publishAll(others[0], client.Buffered, 20)

	resp, err := http.Post(cp.procs[others[0]].Admin+"/api/queues/modes/mode", "application/json", strings.NewReader(`{"durability":"durable"}`))
	if err != nil {
		t.Fatal(err)
	}
	var reply struct {
		Durability string `json:"durability"`
		ServedBy   string `json:"served_by"`
		ModeChange struct {
			Pending bool `json:"pending"`
		} `json:"mode_change"`
	}
	err = json.NewDecoder(resp.Body).Decode(&reply)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || reply.Durability != "durable" || reply.ModeChange.Pending || reply.ServedBy != owner {
		t.Fatalf("POST mode through %s: %s %+v (%v)\n%s", others[0], resp.Status, reply, err, cp.procs[owner].Log())
	}
	for _, id := range cp.ids {
		publishAll(id, client.Durable, 10)
	}
	res, err := cp.dial(t, ctx, others[1]).SetMode(ctx, "modes", client.Buffered)
	if err != nil || res.Durability != client.Buffered {
		t.Fatalf("SetMode through %s: %+v, %v", others[1], res, err)
	}
	publishAll(owner, client.Buffered, 10)
	waitView(t, ctx, cp.procs[others[1]].Admin, &v, func() bool {
		for _, q := range v.Queues {
			if q.Name == "modes" {
				return q.Durability == "buffered" && q.ModeChange == nil
			}
		}
		return false
	})
}
