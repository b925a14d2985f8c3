//go:build faultinject

package daemon

import "testing"

// The armed fault hits the queue's segment files where a solo broker and
// a cluster node keep them, and no other queue's.
func TestFaultHitsTheQueuesLogs(t *testing.T) {
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"/d/queues/q/0/00000000000000000000.seg", true},
		{"/d/replicas/q/7/1/00000000000000000000.seg", true},
		{"/d/queues/other/0/00000000000000000000.seg", false},
		{"/d/replicas/other/7/1/00000000000000000000.seg", false},
		{"/d/replicas/x/q/1/00000000000000000000.seg", false},
		{"/d/q/0/00000000000000000000.seg", false},
	} {
		if got := inQueueLogs(tc.path, "q"); got != tc.want {
			t.Errorf("inQueueLogs(%q, q) = %v, want %v", tc.path, got, tc.want)
		}
	}
}
