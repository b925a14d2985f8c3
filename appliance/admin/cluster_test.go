package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fibril-edge/fibril/appliance"
)

// fakeCluster is a cluster view the daemon would pass in, changeable while
// the server runs.
type fakeCluster struct {
	mu     sync.Mutex
	view   ClusterView
	member bool
}

func (c *fakeCluster) get() (ClusterView, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.view, c.member
}

func (c *fakeCluster) set(v ClusterView, member bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.view, c.member = v, member
}

// threeNodes is n1's view of a three-node cluster led by n1, owning one
// partition of each queue: the durable queue's followers have reported
// progress, written ahead of durable.
func threeNodes() ClusterView {
	ceiling := uint64(90)
	return ClusterView{
		NodeID: "n1", Leader: "n1",
		Members: []Member{
			{ID: "n1", ClusterAddr: "127.0.0.1:7431", ClientAddr: "127.0.0.1:7420", Voter: true},
			{ID: "n2", ClusterAddr: "127.0.0.1:7432", ClientAddr: "127.0.0.1:7422", Voter: true},
			{ID: "n3", ClusterAddr: "127.0.0.1:7433", Voter: false},
		},
		Queues: []ClusterQueue{
			{Name: "orders", Durability: "durable", Policy: "replica_durable:2",
				Partitions: []ClusterPartition{
					{Partition: 0, Owner: "n1", Followers: []string{"n2", "n3"}, Epoch: 3, Reads: "durable on 2 of 3",
						Ceiling: &ceiling, Progress: map[string]CopyProgress{
							"n2": {WrittenNext: 120, DurableNext: 90},
							"n3": {WrittenNext: 110, DurableNext: 80},
						}},
					{Partition: 1, Owner: "n2", Followers: []string{"n1", "n3"}, Epoch: 1, Reads: "durable on 2 of 3",
						Recovering: true, Sealed: 1, SealsNeeded: 2},
				}},
			{Name: "clicks", Durability: "buffered", Policy: "replica_buffered:1",
				LastFailover: &Failover{Epoch: 1, From: "n2", To: "n1", Reason: "owner n2 unreachable for 3s",
					StartedAt: time.Unix(1700000000, 0).UTC(), InstalledAt: time.Unix(1700000001, 500e6).UTC(), DurationMs: 1500},
				Partitions: []ClusterPartition{
					{Partition: 0, Owner: "n1", Followers: []string{"n3"}, Epoch: 1, Reads: "written on 1 of 2",
						Progress: map[string]CopyProgress{"n3": {WrittenNext: 7, DurableNext: 0}}},
				}},
		},
	}
}

// GET /api/cluster: 404 with the usual error body on a solo node (no
// Cluster func, or one that answers false), the view as JSON on a member,
// behind the same auth as the rest of the API.
func TestClusterAPI(t *testing.T) {
	for _, opts := range []Options{{}, {Cluster: func() (ClusterView, bool) { return ClusterView{}, false }}} {
		f := newFixture(t, opts)
		e := f.do("GET", "/api/cluster", nil).wantError(t, http.StatusNotFound, "not_clustered")
		if e.Error != "this node is not a cluster member" {
			t.Errorf("solo node's error %q", e.Error)
		}
	}

	fc := &fakeCluster{view: threeNodes(), member: true}
	f := newFixture(t, Options{Tokens: []string{"s3cret"}, Cluster: fc.get})
	f.do("GET", "/api/cluster", nil).wantError(t, http.StatusUnauthorized, "unauthorized")
	f.token = "s3cret"
	var got ClusterView
	f.do("GET", "/api/cluster", nil).want(t, http.StatusOK, &got)
	if want := threeNodes(); !reflect.DeepEqual(got, want) {
		t.Fatalf("GET /api/cluster:\ngot  %+v\nwant %+v", got, want)
	}
	// The field names are the API's, written and durable kept apart.
	var raw struct {
		Queues []struct {
			Partitions []map[string]json.RawMessage `json:"partitions"`
		} `json:"queues"`
	}
	f.do("GET", "/api/cluster", nil).want(t, http.StatusOK, &raw)
	if p := raw.Queues[0].Partitions[0]; string(p["reads"]) != `"durable on 2 of 3"` ||
		!bytes.Contains(p["progress"], []byte(`"n2": {`)) || !bytes.Contains(p["progress"], []byte(`"written_next": 120`)) ||
		!bytes.Contains(p["progress"], []byte(`"durable_next": 90`)) {
		t.Errorf("partition as JSON: %s", mustJSON(t, p))
	}

	// A node that has joined but knows nothing yet answers lists, not null.
	fc.set(ClusterView{NodeID: "n1"}, true)
	r := f.do("GET", "/api/cluster", nil).want(t, http.StatusOK, nil)
	for _, field := range []string{`"members": []`, `"queues": []`, `"leader": ""`} {
		if !bytes.Contains(r.body, []byte(field)) {
			t.Errorf("empty view %s lacks %s", r.body, field)
		}
	}

	// Leaving the cluster: 404 again.
	fc.set(ClusterView{}, false)
	f.do("GET", "/api/cluster", nil).wantError(t, http.StatusNotFound, "not_clustered")
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// clusterLines returns the scrape's sample lines of the cluster and replica
// families, sorted.
func clusterLines(body []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "fibril_cluster_") || strings.HasPrefix(l, "fibril_replica_") {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

// The cluster metrics follow the view at each scrape: membership and
// leadership, and on owned partitions each follower's written and durable
// progress as separate series and the ceiling where there is one.
func TestClusterMetrics(t *testing.T) {
	v := threeNodes()
	v.Handshaking, v.HandshakesEvicted = 3, 1036
	v.LocalQueues = []LocalQueue{{Name: "site", Reason: "clash"}, {Name: "a", Joining: true}, {Name: "b", Joining: true}}
	for i := range v.Queues {
		if v.Queues[i].Name == "clicks" {
			v.Queues[i].ModeChange = &ClusterModeChange{To: "durable", Since: time.Unix(1_700_000_000, 0)}
		}
	}
	fc := &fakeCluster{view: v, member: true}
	f := newFixture(t, Options{Cluster: fc.get})
	r := f.do("GET", "/metrics", nil).want(t, http.StatusOK, nil)
	want := []string{
		`fibril_cluster_handshakes_evicted_total 1036`,
		`fibril_cluster_handshaking 3`,
		`fibril_cluster_has_leader 1`,
		`fibril_cluster_is_leader 1`,
		`fibril_cluster_last_failover_seconds{mode="buffered",queue="clicks"} 1.5`,
		`fibril_cluster_last_failover_timestamp_seconds{mode="buffered",queue="clicks"} 1.7e+09`,
		`fibril_cluster_local_queues{joining="false"} 1`,
		`fibril_cluster_local_queues{joining="true"} 2`,
		`fibril_cluster_members 3`,
		`fibril_cluster_partition_epoch{mode="buffered",partition="0",queue="clicks"} 1`,
		`fibril_cluster_partition_epoch{mode="durable",partition="0",queue="orders"} 3`,
		`fibril_cluster_partition_epoch{mode="durable",partition="1",queue="orders"} 1`,
		`fibril_cluster_partition_recovering{mode="buffered",partition="0",queue="clicks"} 0`,
		`fibril_cluster_partition_recovering{mode="durable",partition="0",queue="orders"} 0`,
		`fibril_cluster_partition_recovering{mode="durable",partition="1",queue="orders"} 1`,
		`fibril_cluster_queue_mode_change_pending{mode="buffered",queue="clicks",to="durable"} 1`,
		`fibril_replica_ceiling{mode="durable",partition="0",queue="orders"} 90`,
		`fibril_replica_follower_next{boundary="durable",follower="n2",mode="durable",partition="0",queue="orders"} 90`,
		`fibril_replica_follower_next{boundary="durable",follower="n3",mode="buffered",partition="0",queue="clicks"} 0`,
		`fibril_replica_follower_next{boundary="durable",follower="n3",mode="durable",partition="0",queue="orders"} 80`,
		`fibril_replica_follower_next{boundary="written",follower="n2",mode="durable",partition="0",queue="orders"} 120`,
		`fibril_replica_follower_next{boundary="written",follower="n3",mode="buffered",partition="0",queue="clicks"} 7`,
		`fibril_replica_follower_next{boundary="written",follower="n3",mode="durable",partition="0",queue="orders"} 110`,
	}
	if got := clusterLines(r.body); !slices.Equal(got, want) {
		t.Fatalf("cluster series:\ngot  %q\nwant %q", got, want)
	}
	for _, typ := range []string{"# TYPE fibril_cluster_members gauge", "# TYPE fibril_replica_follower_next gauge", "# TYPE fibril_replica_ceiling gauge"} {
		if !bytes.Contains(r.body, []byte(typ+"\n")) {
			t.Errorf("scrape lacks %s", typ)
		}
	}

	// A follower's view during an election: no leader known, no owned
	// partitions, so no replica series.
	v = threeNodes()
	v.NodeID, v.Leader = "n3", ""
	for i := range v.Queues {
		for j := range v.Queues[i].Partitions {
			v.Queues[i].Partitions[j].Ceiling, v.Queues[i].Partitions[j].Progress = nil, nil
		}
	}
	fc.set(v, true)
	r = f.do("GET", "/metrics", nil).want(t, http.StatusOK, nil)
	// Every node exports the partitions' epochs and recoveries, and the
	// queues' last failovers, as the control state has them.
	var everyNode []string
	for _, l := range want {
		if strings.HasPrefix(l, "fibril_cluster_partition_") || strings.HasPrefix(l, "fibril_cluster_last_failover") {
			everyNode = append(everyNode, l)
		}
	}
	want = append([]string{`fibril_cluster_handshakes_evicted_total 0`, `fibril_cluster_handshaking 0`,
		`fibril_cluster_has_leader 0`, `fibril_cluster_is_leader 0`, `fibril_cluster_members 3`,
		`fibril_cluster_local_queues{joining="false"} 0`, `fibril_cluster_local_queues{joining="true"} 0`}, everyNode...)
	slices.Sort(want)
	if got := clusterLines(r.body); !slices.Equal(got, want) {
		t.Fatalf("cluster series without a leader:\ngot  %q\nwant %q", got, want)
	}
	v.Leader = "n1"
	fc.set(v, true)
	r = f.do("GET", "/metrics", nil).want(t, http.StatusOK, nil)
	want = append([]string{`fibril_cluster_handshakes_evicted_total 0`, `fibril_cluster_handshaking 0`,
		`fibril_cluster_has_leader 1`, `fibril_cluster_is_leader 0`, `fibril_cluster_members 3`,
		`fibril_cluster_local_queues{joining="false"} 0`, `fibril_cluster_local_queues{joining="true"} 0`}, everyNode...)
	slices.Sort(want)
	if got := clusterLines(r.body); !slices.Equal(got, want) {
		t.Fatalf("cluster series on a follower:\ngot  %q\nwant %q", got, want)
	}

	// Out of the cluster: nothing.
	fc.set(ClusterView{}, false)
	r = f.do("GET", "/metrics", nil).want(t, http.StatusOK, nil)
	if got := clusterLines(r.body); len(got) != 0 {
		t.Fatalf("cluster series on a node out of the cluster: %q", got)
	}
}

// fakeOps records what the API asks of the cluster.
type fakeOps struct {
	policy   string
	peer     string
	deleted  []string
	settings map[string]string
}

func (o *fakeOps) ClusterSettings() map[string]string { return maps.Clone(o.settings) }

// SetClusterSettings knows one setting, default_policy.
func (o *fakeOps) SetClusterSettings(_ context.Context, kv map[string]string) error {
	for k := range kv {
		if k != "default_policy" {
			return fmt.Errorf("%w: unknown cluster setting %q", appliance.ErrInvalid, k)
		}
	}
	if o.settings == nil {
		o.settings = map[string]string{}
	}
	maps.Copy(o.settings, kv)
	return nil
}

// DeleteQueue knows one cluster queue, "orders".
func (o *fakeOps) DeleteQueue(_ context.Context, name string) error {
	o.deleted = append(o.deleted, name)
	if name != "orders" {
		return fmt.Errorf("%w: %s", appliance.ErrNotFound, name)
	}
	return nil
}

func (o *fakeOps) DeclarePolicy(_ context.Context, c appliance.QueueConfig, policy string) (ClusterDeclaration, bool, error) {
	o.policy = policy
	if policy == "quorum" {
		return ClusterDeclaration{}, false, fmt.Errorf("invalid replication policy %q: %w", policy, appliance.ErrInvalid)
	}
	c.Durability = appliance.Durable
	return ClusterDeclaration{Name: c.Name, Durability: c.Durability.String(), Partitions: c.Partitions, Policy: "majority_durable"}, true, nil
}

func (o *fakeOps) JoinVia(_ context.Context, peer string) error { o.peer = peer; return nil }

func (o *fakeOps) Owner(string) (string, string, bool) { return "n2", "10.0.0.2:7420", true }

// On a cluster node, declarations go through the cluster with their
// policy and join asks the cluster; on a solo node a policy is refused.
func TestClusterDeclareAndJoin(t *testing.T) {
	solo := newFixture(t, Options{})
	solo.do("POST", "/api/queues", map[string]any{"name": "q", "policy": "majority_durable"}).wantError(t, 400, "invalid")
	solo.do("POST", "/api/cluster/join", map[string]any{"peer": "127.0.0.1:7422"}).wantError(t, 404, "not_clustered")

	ops := &fakeOps{}
	f := newFixture(t, Options{ClusterOps: ops})
	var reply map[string]any
	f.do("POST", "/api/queues", map[string]any{"name": "orders", "policy": "majority_durable"}).want(t, 201, &reply)
	q := reply["queue"].(map[string]any)
	if ops.policy != "majority_durable" || q["served_by"] != "n2" || q["policy"] != "majority_durable" || q["durability"] != "durable" {
		t.Fatalf("declare through the cluster: ops %+v, reply %+v", ops, reply)
	}
	f.do("POST", "/api/queues", map[string]any{"name": "x", "policy": "quorum"}).wantError(t, 400, "invalid")
	f.do("POST", "/api/cluster/join", map[string]any{"peer": "nowhere"}).wantError(t, 400, "invalid")
	f.do("POST", "/api/cluster/join", map[string]any{"peer": "10.0.0.1:7422"}).want(t, 200, nil)
	if ops.peer != "10.0.0.1:7422" {
		t.Fatalf("joined via %q", ops.peer)
	}
}

// The cluster-wide settings read and change through the control plane; a
// solo node has none.
func TestClusterSettings(t *testing.T) {
	newFixture(t, Options{}).do("GET", "/api/cluster/settings", nil).wantError(t, 404, "not_clustered")
	ops := &fakeOps{settings: map[string]string{"replicas": "3"}}
	f := newFixture(t, Options{ClusterOps: ops})
	var reply struct{ Settings map[string]string }
	f.do("PUT", "/api/cluster/settings", map[string]string{"default_policy": "replica_buffered:2"}).want(t, 200, &reply)
	if reply.Settings["default_policy"] != "replica_buffered:2" || reply.Settings["replicas"] != "3" {
		t.Fatalf("after PUT: %v", reply.Settings)
	}
	f.do("GET", "/api/cluster/settings", nil).want(t, 200, &reply)
	if ops.settings["default_policy"] != "replica_buffered:2" || reply.Settings["default_policy"] != "replica_buffered:2" {
		t.Fatalf("GET: %v (ops %v)", reply.Settings, ops.settings)
	}
	f.do("PUT", "/api/cluster/settings", map[string]string{"quorum": "2"}).wantError(t, 400, "invalid")
	f.do("PUT", "/api/cluster/settings", map[string]string{}).wantError(t, 400, "invalid")
}

// On a cluster node DELETE /api/queues/{name} goes through the cluster,
// even for a queue the local broker does not serve, and an unknown queue
// is 404; the local broker is not asked (its own queue stays).
func TestClusterDelete(t *testing.T) {
	ops := &fakeOps{}
	f := newFixture(t, Options{ClusterOps: ops})
	ctx := context.Background()
	if _, err := f.b.Declare(ctx, appliance.QueueConfig{Name: "local"}); err != nil {
		t.Fatal(err)
	}
	var reply map[string]string
	f.do("DELETE", "/api/queues/orders", nil).want(t, 200, &reply)
	if reply["deleted"] != "orders" {
		t.Fatalf("reply %v", reply)
	}
	f.do("DELETE", "/api/queues/local", nil).wantError(t, 404, "not_found")
	f.do("DELETE", "/api/queues/bad%20name", nil).wantError(t, 400, "invalid")
	if want := []string{"orders", "local"}; !slices.Equal(ops.deleted, want) {
		t.Fatalf("cluster asked to delete %q, want %q", ops.deleted, want)
	}
	if _, err := f.b.QueueInfo("local"); err != nil {
		t.Fatalf("the local broker's queue went without the cluster: %v", err)
	}

	solo := newFixture(t, Options{})
	if _, err := solo.b.Declare(ctx, appliance.QueueConfig{Name: "q"}); err != nil {
		t.Fatal(err)
	}
	solo.do("DELETE", "/api/queues/q", nil).want(t, 200, nil)
	solo.do("DELETE", "/api/queues/q", nil).wantError(t, 404, "not_found")
}

// modeOps is fakeOps that changes modes: a change stays pending while
// pending is set.
type modeOps struct {
	*fakeOps
	pending bool
	asked   appliance.Durability
}

func (o *modeOps) SetMode(_ context.Context, name string, d appliance.Durability) (ClusterDeclaration, error) {
	o.asked = d
	decl := ClusterDeclaration{Name: name, Durability: "buffered", Partitions: 1, Policy: "majority_durable"}
	if !o.pending {
		decl.Durability = d.String()
	}
	decl.ModeChange, _ = o.PendingMode(name)
	return decl, nil
}

func (o *modeOps) PendingMode(string) (*ClusterModeChange, string) {
	if !o.pending || o.asked == 0 {
		return nil, "buffered"
	}
	return &ClusterModeChange{To: o.asked.String(), Since: time.Unix(1_700_000_000, 0).UTC()}, "buffered"
}

// On a cluster node a mode change is asked for through the cluster: 202
// with the pending change while it waits for the copies, 200 once it is
// in effect, through a node that serves the queue or not; the queue's
// info reports the cluster's pending change and the mode in effect.
func TestClusterModeChange(t *testing.T) {
	ops := &modeOps{fakeOps: &fakeOps{}, pending: true}
	f := newFixture(t, Options{ClusterOps: ops})
	var reply map[string]any
	f.do("POST", "/api/queues/orders/mode", map[string]any{"durability": "durable"}).want(t, http.StatusAccepted, &reply)
	mc, _ := reply["mode_change"].(map[string]any)
	if reply["served_by"] != "n2" || reply["durability"] != "buffered" || mc["pending"] != true || mc["to"] != "durable" {
		t.Fatalf("pending change through a node that does not serve the queue: %+v", reply)
	}
	if _, err := f.b.Declare(t.Context(), appliance.QueueConfig{Name: "here", Durability: appliance.Durable}); err != nil {
		t.Fatal(err)
	}
	var q queueView
	f.do("GET", "/api/queues/here", nil).want(t, http.StatusOK, &q)
	if !q.ModeChange.Pending || q.ModeChange.To != "durable" || q.Durability != "buffered" {
		t.Fatalf("queue info during a pending cluster change: durability %s, change %+v", q.Durability, q.ModeChange)
	}
	ops.pending = false
	f.do("POST", "/api/queues/here/mode", map[string]any{"durability": "durable"}).want(t, http.StatusOK, &q)
	if q.ModeChange.Pending || q.Durability != "durable" {
		t.Fatalf("change in effect: durability %s, change %+v", q.Durability, q.ModeChange)
	}
}
