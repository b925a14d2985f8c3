package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/fibril-edge/fibril/federation/uplink"
)

const uplinkStatusHelp = `Usage: fibril uplink status [flags]

Shows every uplink the node runs (GET /api/uplinks): where it forwards to,
the link's state and last error, and per forwarded queue its remote
queue, state and reason, both queues' modes (a durable queue forwarded
into a buffered one is marked WEAKENED), the backlog still to forward, how
long the oldest message has waited, what is in flight, the forwarded,
resent, duplicate and refused counts, and the last remote confirm. With
--json it prints the API's answer.
`

// runUplinkStatus is "fibril uplink status".
func runUplinkStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("fibril uplink status", pflag.ContinueOnError)
	var conn connFlags
	api, done, err := adminArgs(fs, &conn, uplinkStatusHelp, args, stdout, 0, 0, "")
	if done || err != nil {
		return err
	}
	var raw json.RawMessage
	if err := api.do(ctx, "GET", "/api/uplinks", nil, &raw); err != nil {
		return fmt.Errorf("uplink status: %w", err)
	}
	if conn.json {
		return writeRawJSON(stdout, raw)
	}
	var v struct {
		Uplinks []uplink.Stats `json:"uplinks"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("uplink status: %w", err)
	}
	return printUplinks(stdout, v.Uplinks, time.Now())
}

// printUplinks writes one block per uplink: its link, then a table of its
// queues.
func printUplinks(w io.Writer, list []uplink.Stats, now time.Time) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "no uplinks ([[uplink]] tables in fibril.toml)")
		return err
	}
	for i, u := range list {
		if i > 0 {
			fmt.Fprintln(w)
		}
		remote := "not connected"
		if u.Remote != "" {
			remote = "connected to " + u.Remote
		}
		fmt.Fprintf(w, "uplink %s: %s, %s; forwards to %v, window %d\n", u.Name, u.State, remote, u.To, u.Window)
		if u.LastError != "" {
			fmt.Fprintf(w, "  last error: %s\n", u.LastError)
		}
		if len(u.Queues) == 0 {
			fmt.Fprintln(w, "  no local queue matches its patterns yet")
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  QUEUE\tSTATE\tMODES\tBACKLOG\tOLDEST\tIN FLIGHT\tFORWARDED\tRESENT\tDUPLICATES\tREFUSED\tLAST CONFIRM")
		for _, q := range u.Queues {
			state := string(q.State)
			if q.Reason != "" {
				state += " (" + q.Reason + ")"
			}
			modes := orDash(q.LocalDurability) + " -> " + orDash(q.RemoteDurability)
			if q.Weakened {
				modes += " WEAKENED"
			}
			backlog := "-"
			if q.BacklogMessages >= 0 {
				backlog = fmt.Sprintf("%d (%s)", q.BacklogMessages, byteUnit(q.BacklogBytes))
			}
			last := "never"
			if !q.LastConfirm.IsZero() {
				last = now.Sub(q.LastConfirm).Round(time.Second).String() + " ago"
			}
			fmt.Fprintf(tw, "  %s -> %s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", q.Local, q.Remote, state, modes, backlog,
				q.OldestWaiting.Round(time.Millisecond), q.InFlight, q.Forwarded, q.Resent, q.Duplicates, q.Refused, last)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, q := range u.Queues {
			if q.Weakened {
				fmt.Fprintf(w, "  %s is durable here and buffered there: a message leaves this node once the remote has it written, not synced\n", q.Local)
			}
		}
	}
	return nil
}
