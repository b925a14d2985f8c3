package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/fibril-edge/fibril/appliance"
	"github.com/fibril-edge/fibril/appliance/admin"
)

type joinRecorder struct{ peer, policy string }

func (j *joinRecorder) DeclarePolicy(_ context.Context, c appliance.QueueConfig, policy string) (admin.ClusterDeclaration, bool, error) {
	j.policy = policy
	c.Durability = appliance.Durable
	c = c.WithDefaults()
	return admin.ClusterDeclaration{Name: c.Name, Durability: c.Durability.String(), Partitions: c.Partitions}, true, nil
}
func (j *joinRecorder) JoinVia(_ context.Context, peer string) error { j.peer = peer; return nil }
func (j *joinRecorder) Owner(string) (string, string, bool)          { return "", "", false }
func (j *joinRecorder) DeleteQueue(context.Context, string) error    { return nil }
func (j *joinRecorder) ClusterSettings() map[string]string           { return map[string]string{} }
func (j *joinRecorder) SetClusterSettings(context.Context, map[string]string) error {
	return nil
}

// fibril cluster status prints members, leader and placement with the
// followers' written and durable progress apart; join sends the peer; on
// a solo node both say so with exit status 3.
func TestClusterCommands(t *testing.T) {
	_, solo := newAdmin(t, "tok")
	t.Setenv(envToken, "tok")
	t.Setenv(envAdmin, solo)
	runCLI("cluster", "status").want(t, 3, "", "not a cluster member")
	runCLI("cluster", "join", "10.0.0.1:7422").want(t, 3, "", "not a cluster node")
	runCLI("queue", "declare", "orders", "--policy", "majority_durable").want(t, 1, "", "cluster nodes only")

	b, err := appliance.Open(appliance.Options{DataDir: "d", FS: vfs.NewMem(), MinFreeBytes: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ceil := uint64(40)
	view := admin.ClusterView{NodeID: "n1", Leader: "n2",
		Members: []admin.Member{{ID: "n1", ClusterAddr: "10.0.0.1:7422", ClientAddr: "10.0.0.1:7420", Voter: true},
			{ID: "n2", ClusterAddr: "10.0.0.2:7422", Voter: true}},
		Queues: []admin.ClusterQueue{{Name: "orders", Durability: "durable", Policy: "majority_durable",
			Partitions: []admin.ClusterPartition{{Partition: 0, Owner: "n1", Followers: []string{"n2"}, Epoch: 1,
				Reads: "durable on 2 of 2", Ceiling: &ceil, Log: &admin.CopyProgress{WrittenNext: 9000, DurableNext: 8990},
				Progress: map[string]admin.CopyProgress{"n2": {WrittenNext: 42, DurableNext: 40, CatchingUp: true}}}}}}}
	ops := &joinRecorder{}
	srv, err := admin.New(b, admin.Options{Tokens: []string{"tok"}, Logger: slog.New(slog.DiscardHandler),
		Cluster: func() (admin.ClusterView, bool) { return view, true }, ClusterOps: ops})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	t.Setenv(envAdmin, hs.URL)
	r := runCLI("cluster", "status")
	r.want(t, 0, "leader n2", "")
	r.want(t, 0, "durable on 2 of 2", "")
	r.want(t, 0, "n1 9000/8990  n2 42/40 (catching up)", "")
	runCLI("cluster", "status", "--json").want(t, 0, `"reads":"durable on 2 of 2"`, "")
	runCLI("cluster", "join", "10.0.0.9:7422").want(t, 0, "joined the cluster via 10.0.0.9:7422", "")
	if ops.peer != "10.0.0.9:7422" {
		t.Fatalf("join sent %q", ops.peer)
	}
	runCLI("cluster", "join", "nowhere").want(t, 2, "", "host:port")
	runCLI("queue", "declare", "orders", "--policy", "replica_durable:2").want(t, 0, "declared orders (durable", "")
	if ops.policy != "replica_durable:2" {
		t.Fatalf("declare sent policy %q", ops.policy)
	}
}
