package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
)

const queueLsHelp = `Usage: fibril queue ls [flags]

Lists the queues through fibrild's admin HTTP API (GET /api/queues): name,
mode (buffered queues are marked), partitions, backlog and consumers. With
--json it prints the API's answer as one line.
`

const queueInfoHelp = `Usage: fibril queue info NAME [flags]

Shows one queue through the admin HTTP API (GET /api/queues/NAME): its
settings, counters and, per partition, the written and durable frontiers,
what is written but not yet synced, backlog and leases. With --json it
prints the API's answer as one line. Exit status 3 if there is no such
queue.
`

const queueDeclareHelp = `Usage: fibril queue declare NAME [flags]

Creates a queue through the admin HTTP API (POST /api/queues), following the
declare rules: declaring an existing queue with the same mode succeeds, the
other mode is a conflict (exit status 4). A durable queue confirms a publish
once it is synced to disk; a buffered one once the operating system has it,
so a power loss can lose what was confirmed since the last background sync.
On a cluster node --policy names how many copies confirm and deliver:
replica_durable:N, majority_durable or replica_buffered:N (see
docs/cluster.md); it implies the mode. Flags not given are left to the
broker's defaults.
`

const queueRmHelp = `Usage: fibril queue rm NAME [--force] [flags]

Deletes a queue and its messages through the admin HTTP API
(DELETE /api/queues/NAME). A queue that still holds messages is deleted
only once you answer y to the question (on a terminal), or with --force;
without a terminal and without --force it is left as it is (exit status
1). An empty queue is deleted without asking. Exit status 3 if there is
no such queue.
`

const queueModeHelp = `Usage: fibril queue mode NAME durable|buffered [flags]

Changes a live queue's durability mode through the admin HTTP API
(POST /api/queues/NAME/mode), fenced: a change to buffered is recorded
before any publish is admitted under the weaker rule; a change to durable
closes admission, syncs every partition's log past what it had written,
records the new mode and resumes. Every confirm names the mode it was
given under, so confirms returned before the change keep their meaning.
On a cluster node the queue's owner carries the change out, and a change
to durable takes effect once every copy the policy counts holds durable
what was written before it; while it waits (a follower down) the change
is pending, publishes wait for durable copies, and the command says so
(exit status 0), or with --wait keeps waiting until it is in effect.
Prints the mode in effect. Exit status 3 if there is no such queue, 4 if
another change of the queue is pending; a failed sync leaves the queue in
its mode (exit status 1).
`

const queuePurgeHelp = `Usage: fibril queue purge NAME [--force] [flags]

Discards every ready message of a queue through the admin HTTP API
(POST /api/queues/NAME/purge) and prints how many. Messages delivered and
not settled yet stay with their consumers; nothing goes to the dead-letter
queue. A queue holding ready messages is purged only once you answer y to
the question (on a terminal), or with --force; without a terminal and
without --force it is left as it is (exit status 1). Exit status 3 if
there is no such queue. On a cluster, ask the node serving the queue.
`

// queueAPIPath is the admin API path of one queue.
func queueAPIPath(name string) string { return "/api/queues/" + url.PathEscape(name) }

// runQueueLs is "fibril queue ls".
func runQueueLs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("fibril queue ls", pflag.ContinueOnError)
	var conn connFlags
	api, done, err := adminArgs(fs, &conn, queueLsHelp, args, stdout, 0, 0, "")
	if done || err != nil {
		return err
	}
	var raw json.RawMessage
	if err := api.do(ctx, "GET", "/api/queues", nil, &raw); err != nil {
		return fmt.Errorf("list queues: %w", err)
	}
	if conn.json {
		return writeRawJSON(stdout, raw)
	}
	queues, failed, err := queueList(raw)
	if err != nil {
		return fmt.Errorf("list queues: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMODE\tPARTITIONS\tMESSAGES\tREADY\tIN_FLIGHT\tCONSUMERS")
	for _, q := range queues {
		mode := compact(firstOf(q, "-", "durability", "mode"))
		if mode == "buffered" {
			mode = "buffered (!)" // confirms before the disk has it
		}
		if u, ok := q["unavailable"].(string); ok && u != "" {
			mode += " UNAVAILABLE"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", compact(q["name"]), mode, compact(partitionCount(q)),
			compact(sumField(q, "messages")), compact(sumField(q, "ready")),
			compact(sumField(q, "in_flight")), compact(q["consumers"]))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, f := range failed {
		fmt.Fprintf(stdout, "FAILED %s: %s\n", compact(f["name"]), compact(f["error"]))
	}
	if len(queues) == 0 && len(failed) == 0 {
		fmt.Fprintln(stderr, "no queues; declare one with: fibril queue declare NAME")
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d queues failed to open; see fibrild's log", len(failed))
	}
	return nil
}

// queueList decodes {"queues": [...], "failed": [{"name","error"}]}.
func queueList(raw json.RawMessage) (queues, failed []map[string]any, err error) {
	var list struct {
		Queues []map[string]any `json:"queues"`
		Failed []map[string]any `json:"failed"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, nil, fmt.Errorf("decode answer: %w", err)
	}
	return list.Queues, list.Failed, nil
}

// runQueueInfo is "fibril queue info".
func runQueueInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("fibril queue info", pflag.ContinueOnError)
	var conn connFlags
	api, done, err := adminArgs(fs, &conn, queueInfoHelp, args, stdout, 1, 1, "NAME")
	if done || err != nil {
		return err
	}
	name := fs.Arg(0)
	var raw json.RawMessage
	if err := api.do(ctx, "GET", queueAPIPath(name), nil, &raw); err != nil {
		return fmt.Errorf("queue %s: %w", name, err)
	}
	if conn.json {
		return writeRawJSON(stdout, raw)
	}
	var q map[string]any
	if err := json.Unmarshal(raw, &q); err != nil {
		return fmt.Errorf("queue %s: decode answer: %w", name, err)
	}
	return printObject(stdout, q)
}

// runQueueDeclare is "fibril queue declare".
func runQueueDeclare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("fibril queue declare", pflag.ContinueOnError)
	var conn connFlags
	buffered := fs.Bool("buffered", false, "confirm publishes once written to the OS (fast; a power loss can lose them)")
	durable := fs.Bool("durable", false, "confirm publishes once synced to disk (the broker's default)")
	partitions := fs.Int("partitions", 0, "partitions (default: the broker's)")
	deadLetter := fs.String("dead-letter", "", "queue that receives rejected and expired messages")
	maxDeliveries := fs.Int("max-deliveries", 0, "deliveries before a message goes to the dead-letter queue")
	ackDeadline := fs.Duration("ack-deadline", 0, "how long a delivery may stay unsettled")
	maxBytes := fs.Int64("max-bytes", 0, "bound on the queue's bytes")
	maxMessages := fs.Int64("max-messages", 0, "bound on the queue's messages")
	dropOldest := fs.Bool("drop-oldest", false, "when full, drop the oldest messages instead of refusing publishes")
	dedupe := fs.Duration("dedupe-window", 0, "how long message IDs are remembered to drop duplicates")
	dedupeEntries := fs.Int64("dedupe-max-entries", 0, "most message IDs the queue remembers, all partitions together; past it the oldest are forgotten early (default: the broker's, 100000)")
	dedupeBytes := fs.Int64("dedupe-max-bytes", 0, "most memory the queue's remembered IDs take, in bytes (default: the broker's, 16 MiB)")
	policy := fs.String("policy", "", "cluster replication policy: replica_durable:N, majority_durable or replica_buffered:N")
	conn.addAdminFlags(fs)
	if done, err := parseFlags(fs, queueDeclareHelp, args, stdout); done || err != nil {
		return err
	}
	if err := wantArgs(fs, 1, 1, "NAME"); err != nil {
		return err
	}
	if *buffered && *durable {
		return usagef("--buffered and --durable exclude each other")
	}
	name := fs.Arg(0)
	req := map[string]any{"name": name}
	switch {
	case *buffered:
		req["durability"] = "buffered"
	case *durable:
		req["durability"] = "durable"
	}
	set := func(flag, key string, v any) {
		if fs.Changed(flag) {
			req[key] = v
		}
	}
	set("partitions", "partitions", *partitions)
	set("dead-letter", "dead_letter", *deadLetter)
	set("max-deliveries", "max_deliveries", *maxDeliveries)
	set("ack-deadline", "ack_deadline_ms", ackDeadline.Milliseconds())
	set("max-bytes", "max_bytes", *maxBytes)
	set("max-messages", "max_messages", *maxMessages)
	if *dropOldest {
		req["overflow"] = "drop-oldest"
	}
	set("dedupe-window", "dedupe_window_ms", dedupe.Milliseconds())
	set("dedupe-max-entries", "dedupe_max_entries", *dedupeEntries)
	set("dedupe-max-bytes", "dedupe_max_bytes", *dedupeBytes)
	set("policy", "policy", *policy)
	for _, d := range []*time.Duration{ackDeadline, dedupe} {
		if *d < 0 {
			return usagef("durations must not be negative")
		}
	}

	api, err := conn.adminClient()
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := api.do(ctx, "POST", "/api/queues", req, &raw); err != nil {
		if exitCode(err) == exitConflict {
			return fmt.Errorf("declare %s: %w (a queue's mode is fixed when it is first declared: delete it with `fibril queue rm %s` to change it)", name, err, name)
		}
		return fmt.Errorf("declare %s: %w", name, err)
	}
	if conn.json {
		return writeRawJSON(stdout, raw)
	}
	var reply struct {
		Created bool           `json:"created"`
		Queue   map[string]any `json:"queue"`
	}
	if err := json.Unmarshal(raw, &reply); err != nil {
		return fmt.Errorf("declare %s: decode answer: %w", name, err)
	}
	q := reply.Queue
	verb := "declared"
	if !reply.Created {
		verb = "exists:"
	}
	fmt.Fprintf(stdout, "%s %s (%s, %s partitions)\n", verb, name, compact(q["durability"]), compact(partitionCount(q)))
	if w, ok := q["warning"].(string); ok && w != "" {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	return nil
}

// runQueueRm is "fibril queue rm".
func runQueueRm(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("fibril queue rm", pflag.ContinueOnError)
	force := fs.BoolP("force", "f", false, "delete a queue that holds messages without asking")
	var conn connFlags
	api, done, err := adminArgs(fs, &conn, queueRmHelp, args, stdout, 1, 1, "NAME")
	if done || err != nil {
		return err
	}
	name := fs.Arg(0)
	if !*force {
		var q struct {
			Messages int64 `json:"messages"`
		}
		if err := api.do(ctx, "GET", queueAPIPath(name), nil, &q); err != nil {
			return fmt.Errorf("delete %s: %w", name, err)
		}
		if q.Messages > 0 {
			if err := confirmDelete(name, q.Messages, stderr); err != nil {
				return err
			}
		}
	}
	if err := api.do(ctx, "DELETE", queueAPIPath(name), nil, nil); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	if conn.json {
		return writeJSON(stdout, map[string]any{"deleted": name})
	}
	_, err = fmt.Fprintf(stdout, "deleted %s\n", name)
	return err
}

// runQueueMode is "fibril queue mode".
func runQueueMode(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("fibril queue mode", pflag.ContinueOnError)
	wait := fs.Bool("wait", false, "on a cluster, wait until the change is in effect")
	var conn connFlags
	api, done, err := adminArgs(fs, &conn, queueModeHelp, args, stdout, 2, 2, "NAME durable|buffered")
	if done || err != nil {
		return err
	}
	name, mode := fs.Arg(0), fs.Arg(1)
	if mode != "durable" && mode != "buffered" {
		return usagef("mode %q: want durable or buffered", mode)
	}
	var raw json.RawMessage
	var q struct {
		Durability string `json:"durability"`
		Warning    string `json:"warning"`
		ModeChange struct {
			Pending bool   `json:"pending"`
			To      string `json:"to"`
		} `json:"mode_change"`
	}
	for {
		// Asking again for the change pending is harmless: the answer
		// says whether it is in effect yet.
		if err := api.do(ctx, "POST", queueAPIPath(name)+"/mode", map[string]string{"durability": mode}, &raw); err != nil {
			return fmt.Errorf("change the mode of %s: %w", name, err)
		}
		if err := json.Unmarshal(raw, &q); err != nil {
			return fmt.Errorf("decode answer: %w", err)
		}
		if !*wait || !q.ModeChange.Pending {
			break
		}
		fmt.Fprintf(stderr, "the change of %s to %s is pending (the copies the policy counts are not all durable yet); waiting\n", name, q.ModeChange.To)
		select {
		case <-ctx.Done():
			return fmt.Errorf("change the mode of %s: %w", name, ctx.Err())
		case <-time.After(time.Second): // the admin API's answer is the state, polled
		}
	}
	if conn.json {
		return writeRawJSON(stdout, raw)
	}
	if q.ModeChange.Pending {
		fmt.Fprintf(stdout, "%s is %s; the change to %s is pending (fibril queue info %s shows it; --wait waits for it)\n",
			name, q.Durability, q.ModeChange.To, name)
		return nil
	}
	fmt.Fprintf(stdout, "%s is %s\n", name, q.Durability)
	if q.Warning != "" {
		fmt.Fprintf(stderr, "warning: %s\n", q.Warning)
	}
	return nil
}

// runQueuePurge is "fibril queue purge".
func runQueuePurge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("fibril queue purge", pflag.ContinueOnError)
	force := fs.BoolP("force", "f", false, "purge without asking")
	var conn connFlags
	api, done, err := adminArgs(fs, &conn, queuePurgeHelp, args, stdout, 1, 1, "NAME")
	if done || err != nil {
		return err
	}
	name := fs.Arg(0)
	if !*force {
		var q struct {
			Ready int64 `json:"ready"`
		}
		if err := api.do(ctx, "GET", queueAPIPath(name), nil, &q); err != nil {
			return fmt.Errorf("purge %s: %w", name, err)
		}
		if q.Ready > 0 {
			if err := confirmOn(name, fmt.Sprintf("Discard the %d ready messages of queue %s?", q.Ready, name),
				fmt.Sprintf("queue %s holds %d ready messages; pass --force to discard them", name, q.Ready), stderr); err != nil {
				return err
			}
		}
	}
	var rep struct {
		Purged int64 `json:"purged"`
	}
	if err := api.do(ctx, "POST", queueAPIPath(name)+"/purge", nil, &rep); err != nil {
		return fmt.Errorf("purge %s: %w", name, err)
	}
	if conn.json {
		return writeJSON(stdout, map[string]any{"queue": name, "purged": rep.Purged})
	}
	_, err = fmt.Fprintf(stdout, "purged %s: %d messages discarded\n", name, rep.Purged)
	return err
}

// confirmDelete asks on the terminal whether to delete a queue holding
// messages; without a terminal it refuses, pointing at --force.
func confirmDelete(name string, messages int64, stderr io.Writer) error {
	return confirmOn(name, fmt.Sprintf("Delete queue %s and its %d messages?", name, messages),
		fmt.Sprintf("queue %s holds %d messages; pass --force to delete it with them", name, messages), stderr)
}

// confirmOn asks question on the terminal; without a terminal it refuses
// with refusal.
func confirmOn(name, question, refusal string, stderr io.Writer) error {
	if !isTerminal(os.Stdin) {
		return errors.New(refusal)
	}
	fmt.Fprintf(stderr, "%s [y/N] ", question)
	answer, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return fmt.Errorf("queue %s left as it is", name)
	}
	return nil
}

// writeRawJSON prints an API answer compacted to one line.
func writeRawJSON(w io.Writer, raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return writeJSON(w, v)
}

// firstOf returns the first of keys that o has, or def.
func firstOf(o map[string]any, def any, keys ...string) any {
	for _, k := range keys {
		if v, ok := o[k]; ok && v != nil {
			return v
		}
	}
	return def
}

// partitionCount reads "partitions" as a number or a list.
func partitionCount(q map[string]any) any {
	switch p := q["partitions"].(type) {
	case []any:
		return len(p)
	case nil:
		return "-"
	default:
		return p
	}
}

// sumField returns q[key], or the sum of key over q's partitions, or "-".
func sumField(q map[string]any, key string) any {
	if v, ok := q[key].(float64); ok {
		return v
	}
	parts, ok := q["partitions"].([]any)
	if !ok {
		return "-"
	}
	sum, found := 0.0, false
	for _, p := range parts {
		if m, ok := p.(map[string]any); ok {
			if v, ok := m[key].(float64); ok {
				sum, found = sum+v, true
			}
		}
	}
	if !found {
		return "-"
	}
	return sum
}

// printObject prints an object's scalar fields as "key: value" lines,
// nested objects indented, and lists of objects as tables.
func printObject(w io.Writer, o map[string]any) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	var tables []string
	keys := sortedKeys(o)
	sort.SliceStable(keys, func(i, j int) bool { return fieldRank(keys[i]) < fieldRank(keys[j]) })
	for _, k := range keys {
		switch v := o[k].(type) {
		case []any:
			if len(v) > 0 {
				if _, ok := v[0].(map[string]any); ok {
					tables = append(tables, k)
					continue
				}
			}
			fmt.Fprintf(tw, "%s:\t%s\n", k, compact(v))
		case map[string]any:
			if k == "counters" { // one line: the counters that moved
				var moved []string
				for _, sub := range sortedKeys(v) {
					if n, ok := v[sub].(float64); !ok || n != 0 {
						moved = append(moved, sub+" "+compact(v[sub]))
					}
				}
				if len(moved) == 0 {
					moved = []string{"all 0"}
				}
				fmt.Fprintf(tw, "%s:\t%s\n", k, strings.Join(moved, ", "))
				continue
			}
			for _, sub := range sortedKeys(v) {
				fmt.Fprintf(tw, "%s.%s:\t%s\n", k, sub, compact(v[sub]))
			}
		default:
			fmt.Fprintf(tw, "%s:\t%s\n", k, compact(v))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, k := range tables {
		rows := o[k].([]any)
		cols := map[string]bool{}
		for _, r := range rows {
			if m, ok := r.(map[string]any); ok {
				for c := range m {
					cols[c] = true
				}
			}
		}
		names := sortedKeys(cols)
		sort.SliceStable(names, func(i, j int) bool { return columnRank(names[i]) < columnRank(names[j]) })
		if k == "partitions" {
			// The columns that fit a terminal; every field is in --json,
			// and what is wrong with a partition follows the table.
			names = slices.DeleteFunc(names, func(c string) bool { return !slices.Contains(partitionColumns, c) })
		}
		fmt.Fprintf(w, "\n%s:\n", k)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.ToUpper(strings.Join(names, "\t")))
		for _, r := range rows {
			m, _ := r.(map[string]any)
			vals := make([]string, len(names))
			for i, c := range names {
				vals[i] = compact(m[c])
				if c == "last_sync" {
					vals[i] = sinceText(m[c])
				}
			}
			fmt.Fprintln(tw, strings.Join(vals, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if k == "partitions" {
			partitionNotes(w, rows)
		}
	}
	return nil
}

// partitionColumns are the partition table's columns in queue info: its
// mode, frontiers, what a power cut could take, backlog and retention.
var partitionColumns = []string{"index", "mode", "written_next", "durable_next", "unsynced_records",
	"oldest_unsynced_ms", "last_sync", "messages", "ready", "in_flight", "head", "segments", "latched"}

// partitionNotes prints, after the table, what is wrong with a partition:
// a latched log's error and the ranges quarantined as corrupt.
func partitionNotes(w io.Writer, rows []any) {
	for _, r := range rows {
		m, _ := r.(map[string]any)
		idx := compact(m["index"])
		if e, _ := m["last_error"].(string); e != "" {
			fmt.Fprintf(w, "partition %s: %s\n", idx, e)
		}
		if qs, _ := m["quarantined"].([]any); len(qs) > 0 {
			fmt.Fprintf(w, "partition %s: %d range(s) quarantined as corrupt, %s records lost: %s\n", idx, len(qs), compact(m["lost_records"]), compact(qs))
		}
	}
}

// columnOrder puts a partition's identity and frontiers first; other
// columns follow in name order.
var columnOrder = []string{"index", "partition", "name", "mode", "written_next", "durable_next", "unsynced_records",
	"unsynced_bytes", "oldest_unsynced_ms", "last_sync", "sync_pending", "messages", "ready", "in_flight",
	"head", "segments", "latched"}

// sinceText shows an RFC 3339 time as its age ("1.2s ago"), "never" for
// none, and anything else as it is.
func sinceText(v any) string {
	s, ok := v.(string)
	if !ok || s == "" {
		return "never"
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return time.Since(t).Round(time.Millisecond).String() + " ago"
}

// fieldOrder puts what a queue is before what it holds.
var fieldOrder = []string{"name", "durability", "warning", "unavailable", "messages", "ready", "in_flight", "consumers", "bytes"}

func fieldRank(name string) int {
	if i := slices.Index(fieldOrder, name); i >= 0 {
		return i
	}
	return len(fieldOrder)
}

func columnRank(name string) int {
	if i := slices.Index(columnOrder, name); i >= 0 {
		return i
	}
	return len(columnOrder)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// compact prints a JSON value briefly: strings bare, numbers without
// exponent, the rest as JSON.
func compact(v any) string {
	switch v := v.(type) {
	case nil:
		return "-"
	case string:
		return v
	case float64:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%f", v), "0"), ".")
	}
	b, _ := json.Marshal(v)
	return string(b)
}
