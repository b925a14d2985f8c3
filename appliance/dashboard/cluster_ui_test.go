package dashboard

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fibril-edge/fibril/appliance/admin"
)

// clusterView is n1's view of a three-node cluster it leads: it owns the
// durable queue's partition 0, whose followers report written ahead of
// durable, and follows partition 1.
func clusterView() admin.ClusterView {
	ceiling := uint64(90)
	return admin.ClusterView{
		NodeID: "n1", Leader: "n1",
		Members: []admin.Member{
			{ID: "n1", ClusterAddr: "127.0.0.1:7431", ClientAddr: "127.0.0.1:7420", Voter: true},
			{ID: "n2", ClusterAddr: "127.0.0.1:7432", ClientAddr: "127.0.0.1:7422", Voter: true},
			{ID: "n3", ClusterAddr: "127.0.0.1:7433", Voter: false},
		},
		Queues: []admin.ClusterQueue{
			{Name: "clicks", Durability: "buffered", Policy: "replica_buffered:2",
				Partitions: []admin.ClusterPartition{
					{Partition: 0, Owner: "n2", Followers: []string{"n1", "n3"}, Epoch: 2, Reads: "written on 2 of 3",
						Recovering: true, Sealed: 1, SealsNeeded: 2, CutSealed: 1},
				},
				LastFailover: &admin.Failover{Epoch: 2, From: "n2", Reason: "owner n2 unreachable for 3s", StartedAt: time.Now()}},
			{Name: "orders", Durability: "buffered", Policy: "replica_durable:2",
				ModeChange: &admin.ClusterModeChange{To: "durable", Since: time.Now()},
				Warnings:   []string{"policy replica_accepted is deprecated and means replica_durable; write replica_durable"},
				Partitions: []admin.ClusterPartition{
					{Partition: 0, Owner: "n1", Followers: []string{"n2", "n3"}, Epoch: 3, Reads: "durable on 2 of 3",
						Mode: "durable", Ceiling: &ceiling, Log: &admin.CopyProgress{WrittenNext: 125, DurableNext: 100},
						Progress: map[string]admin.CopyProgress{
							"n2": {WrittenNext: 120, DurableNext: 90},
							"n3": {WrittenNext: 110, DurableNext: 80, CatchingUp: true},
						}},
					{Partition: 1, Owner: "n2", Followers: []string{"n1", "n3"}, Epoch: 1, Reads: "durable on 2 of 3"},
				}},
		},
		LocalQueues: []admin.LocalQueue{{Name: "site-orders", Reason: "the cluster already has a queue of that name (durable, 1 partitions, owned by n2)"}},
	}
}

// TestDashboardCluster drives the cluster page in headless Chromium: the
// nav link is there only on a cluster member; the page shows the members,
// the leader, each queue's mode and policy, each partition's placement and
// how its policy reads, and the followers' written and durable progress in
// their own columns; it follows the view live (an election, progress) and
// fits a 375 px screen.
func TestDashboardCluster(t *testing.T) {
	var mu sync.Mutex
	view := clusterView()
	base, _ := startNode(t, admin.Options{Cluster: func() (admin.ClusterView, bool) {
		mu.Lock()
		defer mu.Unlock()
		return view, true
	}})
	b := startBrowser(t, 1280, 900)
	page := `main[data-page="cluster"] `
	orders := page + `article[data-queue="orders"] `

	b.Do(t, "open the queues page", chromedp.Navigate(base+"/#/queues"), chromedp.WaitVisible(chromedp.CSS(`main[data-page="queues"] h1`)))
	b.Do(t, "follow the Cluster link", chromedp.WaitVisible(chromedp.CSS(`#nav-cluster`)), click(`#nav-cluster`),
		chromedp.WaitVisible(chromedp.CSS(orders+`tr[data-follower="n2"] td[data-field="durable-next"]`)))

	for sel, want := range map[string]string{
		page + `dd[data-field="leader"]`:                                          "n1",
		page + `tr[data-member="n2"] td[data-field="cluster-addr"]`:               "127.0.0.1:7432",
		page + `tr[data-member="n1"] td[data-field="client-addr"]`:                "127.0.0.1:7420",
		page + `tr[data-member="n1"] td[data-field="role"]`:                       "leader",
		page + `tr[data-member="n3"] td[data-field="voter"]`:                      "no",
		page + `tr[data-member="n2"] td[data-field="voter"]`:                      "yes",
		page + `article[data-queue="clicks"] [data-field="mode"]`:                 "buffered",
		page + `article[data-queue="clicks"] [data-field="policy"]`:               "replica_buffered:2",
		page + `article[data-queue="clicks"] td[data-field="reads"]`:              "written on 2 of 3",
		orders + `[data-field="mode"]`:                                            "buffered",
		orders + `[data-field="mode-change"]`:                                     "changing to durable",
		orders + `tr[data-partition="0"] td[data-field="applies"]`:                "durable",
		page + `tr[data-local-queue="site-orders"] td[data-field="local-state"]`:  "name clash",
		page + `tr[data-local-queue="site-orders"] td[data-field="local-reason"]`: "already has",
		orders + `[data-field="policy-warning"]`:                                  "deprecated",
		orders + `tr[data-partition="0"] td[data-field="owner"]`:                  "n1 (this node)",
		orders + `tr[data-partition="0"] td[data-field="followers"]`:              "n2, n3",
		orders + `tr[data-partition="0"] td[data-field="epoch"]`:                  "3",
		orders + `tr[data-partition="0"] td[data-field="reads"]`:                  "durable on 2 of 3",
		orders + `tr[data-partition="0"] td[data-field="ceiling"]`:                "90",
		orders + `tr[data-partition="1"] td[data-field="owner"]`:                  "n2",
		orders + `tr[data-follower="n2"] td[data-field="written-next"]`:           "120",
		orders + `tr[data-follower="n2"] td[data-field="durable-next"]`:           "90",
		orders + `tr[data-follower="n3"] td[data-field="written-next"]`:           "110",
		orders + `tr[data-follower="n3"] td[data-field="durable-next"]`:           "80",
		orders + `tr[data-follower="n3"] td[data-field="unsynced"]`:               "30",
		orders + `tr[data-follower="n2"] td[data-field="behind"]`:                 "5",
		orders + `tr[data-follower="n3"] td[data-field="behind"]`:                 "15",
		orders + `tr[data-follower="n2"] td[data-field="stream"]`:                 "push",
		orders + `tr[data-follower="n3"] td[data-field="stream"]`:                 "catching up",
		page + `article[data-queue="clicks"] td[data-field="ceiling"]`:            "—",
		page + `article[data-queue="clicks"] td[data-field="state"]`:              "recovering: 1 of 2 witnesses sealed, 1 more that may have lost unsynced records (waits for every copy)",
		page + `article[data-queue="clicks"] [data-field="last-failover"]`:        "epoch 2",
		orders + `tr[data-partition="0"] td[data-field="state"]`:                  "serving",
	} {
		if got := b.Text(t, sel); !strings.Contains(strings.ToLower(got), strings.ToLower(want)) { // badges are upper case by style
			t.Errorf("%s says %q, want %q in it", sel, got, want)
		}
	}
	b.WaitFor(t, "no progress rows on a partition this node does not own",
		`document.querySelector('`+page+`article[data-queue="clicks"] [data-follower]') === null`, `'progress rows shown'`)
	b.Screenshot(t, "dashboard-cluster.png")

	// An election under way, then the followers sync: the page follows.
	mu.Lock()
	view = clusterView()
	view.Leader = ""
	view.Queues[1].Partitions[0].Progress["n3"] = admin.CopyProgress{WrittenNext: 130, DurableNext: 130}
	mu.Unlock()
	b.WaitFor(t, "no leader shown", textOf(page+`dd[data-field="leader"]`)+` === 'none known'`, textOf(page+`dd[data-field="leader"]`))
	b.WaitFor(t, "n3's durable progress", number(orders+`tr[data-follower="n3"] td[data-field="durable-next"]`)+` === 130`,
		textOf(orders+`tr[data-follower="n3"] td[data-field="durable-next"]`))
	if got := b.Text(t, page+`[data-field="no-leader"]`); !strings.Contains(got, "No leader") {
		t.Errorf("no-leader warning says %q", got)
	}

	b.Do(t, "a 375 px screen", chromedp.EmulateViewport(375, 812), chromedp.Navigate(base+"/#/cluster"),
		chromedp.WaitVisible(chromedp.CSS(orders+`tr[data-follower="n2"]`)))
	b.WaitFor(t, "no horizontal overflow at 375 px", `document.documentElement.scrollWidth <= window.innerWidth`,
		`'scrollWidth ' + document.documentElement.scrollWidth + ' innerWidth ' + window.innerWidth`)
	b.Screenshot(t, "dashboard-cluster-375px.png")
	b.CheckNoExceptions(t)
}

// TestDashboardSoloHasNoClusterLink: on a solo node the Cluster link stays
// hidden, and the page, opened by hand, says the node is not a member.
func TestDashboardSoloHasNoClusterLink(t *testing.T) {
	base, _ := startNode(t, admin.Options{})
	b := startBrowser(t, 800, 600)
	b.Do(t, "open the cluster page", chromedp.Navigate(base+"/#/cluster"),
		chromedp.WaitVisible(chromedp.CSS(`main[data-page="cluster"] [data-field="not-clustered"]`)))
	b.Do(t, "open the queues page", chromedp.Navigate(base+"/#/queues"), chromedp.WaitVisible(chromedp.CSS(`main[data-page="queues"] h1`)))
	b.WaitFor(t, "the probe's answer", `document.getElementById('nav-cluster').dataset.probed === 'solo'`,
		`document.getElementById('nav-cluster').dataset.probed`)
	if hidden, err := chromedp.Run(b.Ctx, chromedp.Evaluate[bool](`document.getElementById('nav-cluster').hidden`)); err != nil || !hidden {
		t.Errorf("the Cluster link on a solo node: hidden %v (%v)", hidden, err)
	}
	b.CheckNoExceptions(t)
}
