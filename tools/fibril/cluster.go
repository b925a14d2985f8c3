package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fibril-edge/fibril/appliance/admin"
	"github.com/spf13/pflag"
)

const clusterStatusHelp = `Usage: fibril cluster status [flags]

Shows the cluster as the node behind the admin API sees it
(GET /api/cluster): members, the leader, and per queue its policy and each
partition's owner, followers and what a confirm waits for ("durable on 2 of
3"); on the owner, each follower's written and durable progress, kept
apart. With --json it prints the API's answer. Exit status 3 on a node that
is not a cluster member.
`

const clusterJoinHelp = `Usage: fibril cluster join PEER [flags]

Asks the node behind the admin API to join the cluster that the node at
PEER (its cluster address, host:port) belongs to (POST /api/cluster/join).
The node must run with [cluster] listen set; a voter is added to the
control plane's votes, a non_voter only to the member list. Queues the
node served solo join the cluster with their messages once it is a
member; one whose name the cluster already has stays local (fibril
cluster status lists it).
`

// runClusterStatus is "fibril cluster status".
func runClusterStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("fibril cluster status", pflag.ContinueOnError)
	var conn connFlags
	api, done, err := adminArgs(fs, &conn, clusterStatusHelp, args, stdout, 0, 0, "")
	if done || err != nil {
		return err
	}
	var raw json.RawMessage
	if err := api.do(ctx, "GET", "/api/cluster", nil, &raw); err != nil {
		if isAPIStatus(err, 404) {
			return withExit(exitNotFound, fmt.Errorf("not a cluster member: %w", err))
		}
		return fmt.Errorf("cluster status: %w", err)
	}
	if conn.json {
		return writeRawJSON(stdout, raw)
	}
	var v admin.ClusterView
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("cluster status: %w", err)
	}
	return printClusterView(stdout, v)
}

func printClusterView(w io.Writer, v admin.ClusterView) error {
	leader := v.Leader
	if leader == "" {
		leader = "none (election under way, or too few voters up)"
	}
	fmt.Fprintf(w, "node %s, leader %s\n\n", v.NodeID, leader)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tCLUSTER_ADDR\tCLIENT_ADDR\tVOTER")
	for _, m := range v.Members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\n", m.ID, m.ClusterAddr, orDash(m.ClientAddr), m.Voter)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "QUEUE\tPARTITION\tOWNER\tFOLLOWERS\tEPOCH\tCONFIRMS WHEN\tPROGRESS (written/durable next)")
	for _, q := range v.Queues {
		for _, p := range q.Partitions {
			var prog []string
			if p.Log != nil {
				prog = append(prog, fmt.Sprintf("%s %d/%d", p.Owner, p.Log.WrittenNext, p.Log.DurableNext))
			}
			for _, f := range p.Followers {
				if fp, ok := p.Progress[f]; ok {
					line := fmt.Sprintf("%s %d/%d", f, fp.WrittenNext, fp.DurableNext)
					if fp.CatchingUp {
						line += " (catching up)"
					}
					prog = append(prog, line)
				}
			}
			if p.Recovering {
				line := fmt.Sprintf("RECOVERING: %d of %d witnesses sealed", p.Sealed, p.SealsNeeded)
				if p.CutSealed > 0 {
					line += fmt.Sprintf(", %d more that may have lost unsynced records (waits for every copy)", p.CutSealed)
				}
				prog = []string{line}
			}
			fmt.Fprintf(tw, "%s (%s, %s)\t%d\t%s\t%s\t%d\t%s\t%s\n", q.Name, q.Durability, q.Policy, p.Partition,
				p.Owner, orDash(strings.Join(p.Followers, ",")), p.Epoch, p.Reads, orDash(strings.Join(prog, "  ")))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, q := range v.LocalQueues {
		state := "served by this node alone, not replicated"
		if q.Joining {
			state = "served by this node alone until it joins"
		}
		fmt.Fprintf(w, "local queue %s: %s: %s\n", q.Name, state, q.Reason)
	}
	for _, q := range v.Queues {
		if f := q.LastFailover; f != nil {
			took := "under way"
			if f.DurationMs > 0 || !f.InstalledAt.IsZero() {
				took = fmt.Sprintf("%s to %s in %dms", f.From, f.To, f.DurationMs)
			}
			fmt.Fprintf(w, "last failover of %s: epoch %d at %s, %s (%s)\n", q.Name, f.Epoch,
				f.StartedAt.Format(time.RFC3339), took, f.Reason)
		}
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// runClusterJoin is "fibril cluster join".
func runClusterJoin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("fibril cluster join", pflag.ContinueOnError)
	var conn connFlags
	api, done, err := adminArgs(fs, &conn, clusterJoinHelp, args, stdout, 1, 1, "PEER")
	if done || err != nil {
		return err
	}
	peer := fs.Arg(0)
	if _, port, err := net.SplitHostPort(peer); err != nil || port == "" {
		return usagef("%q is not a host:port cluster address", peer)
	}
	if err := api.do(ctx, "POST", "/api/cluster/join", map[string]string{"peer": peer}, nil); err != nil {
		if isAPIStatus(err, 404) {
			return withExit(exitNotFound, fmt.Errorf("not a cluster node ([cluster] listen is empty): %w", err))
		}
		return fmt.Errorf("join via %s: %w", peer, err)
	}
	fmt.Fprintf(stdout, "joined the cluster via %s\n", peer)
	return nil
}
