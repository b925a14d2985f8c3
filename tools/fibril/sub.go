package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/fibril-edge/fibril/appliance/client"
)

const subHelp = `Usage: fibril sub QUEUE [flags]

Subscribes to QUEUE over the client protocol and prints each delivery:
"partition=P offset=O [id=ID] [deliveries=N] [KEY=VALUE headers]" then a
tab and the body (quoted when it is not plain text). With --json each
delivery is one line {"queue","partition","offset","id","deliveries",
"headers":[{"key","value"}],"body"} (body_base64 instead of body when the
body is not UTF-8).

--ack says what happens to each delivery once printed:
  ack      acknowledge it: the queue forgets it (default)
  none     leave it unsettled: the broker delivers it again once the
           queue's ack deadline passes (a look that consumes nothing,
           but holds the messages for that long)
  reject   nack without requeue: the broker drops it, or moves it to the
           queue's dead-letter queue if it has one
  requeue  nack with requeue: the broker delivers it again at once (use
           with --max, or it comes straight back)

It runs until --max deliveries were printed, until no delivery has come
for --timeout, or until interrupted; each ends it with status 0.
`

// ackModes are the values of --ack.
var ackModes = []string{"ack", "none", "reject", "requeue"}

// runSub is "fibril sub".
func runSub(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("fibril sub", pflag.ContinueOnError)
	var conn connFlags
	ack := fs.String("ack", "ack", "what to do with each delivery: "+strings.Join(ackModes, ", "))
	maxN := fs.Int("max", 0, "stop after this many deliveries (0: no limit)")
	timeout := fs.Duration("timeout", 0, "stop when no delivery has come for this long (0: wait forever)")
	prefetch := fs.Int("prefetch", 0, "deliveries held unsettled at once (default: --max if below 100, else the broker's)")
	conn.addServerFlags(fs)
	if done, err := parseFlags(fs, subHelp, args, stdout); done || err != nil {
		return err
	}
	if err := wantArgs(fs, 1, 1, "QUEUE"); err != nil {
		return err
	}
	validAck := false
	for _, m := range ackModes {
		validAck = validAck || m == *ack
	}
	switch {
	case !validAck:
		return usagef("--ack %q: want one of %s", *ack, strings.Join(ackModes, ", "))
	case *maxN < 0:
		return usagef("--max %d: must not be negative", *maxN)
	case *timeout < 0:
		return usagef("--timeout %v: must not be negative", *timeout)
	case *prefetch < 0:
		return usagef("--prefetch %d: must not be negative", *prefetch)
	}
	if *prefetch == 0 && *maxN > 0 && *maxN < 100 {
		*prefetch = *maxN
	}
	queue := fs.Arg(0)

	cl, err := conn.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	cons, err := cl.Consume(ctx, queue, *prefetch)
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", queue, publishAdvice(err))
	}
	defer cons.Close()

	var idle <-chan time.Time
	var timer *time.Timer
	if *timeout > 0 {
		timer = time.NewTimer(*timeout)
		defer timer.Stop()
		idle = timer.C
	}
	for n := 0; *maxN == 0 || n < *maxN; n++ {
		var d *client.Delivery
		var open bool
		select {
		case d, open = <-cons.Messages():
			if !open { // the consumer ended: say why, as Done does
				<-cons.Done()
				if err := cons.Err(); err != nil {
					return fmt.Errorf("subscription to %s ended: %w", queue, err)
				}
				return fmt.Errorf("subscription to %s ended: the connection to fibrild closed", queue)
			}
		case <-cons.Done():
			if err := cons.Err(); err != nil {
				return fmt.Errorf("subscription to %s ended: %w", queue, err)
			}
			return nil
		case <-idle:
			return nil
		case <-ctx.Done():
			return nil
		}
		if err := printDelivery(stdout, d, conn.json); err != nil {
			return err
		}
		if err := settle(d, *ack); err != nil {
			return fmt.Errorf("settle %s partition %d offset %d: %w", queue, d.Partition, d.Offset, err)
		}
		if timer != nil {
			timer.Reset(*timeout)
		}
	}
	return nil
}

func settle(d *client.Delivery, mode string) error {
	switch mode {
	case "ack":
		return d.Ack()
	case "reject":
		return d.Nack(false)
	case "requeue":
		return d.Nack(true)
	}
	return nil // none
}

// jsonHeader is a header in --json output; headers keep their order and
// keys may repeat, so they are a list.
type jsonHeader struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type jsonDelivery struct {
	Queue      string       `json:"queue"`
	Partition  int          `json:"partition"`
	Offset     uint64       `json:"offset"`
	ID         string       `json:"id,omitempty"`
	Deliveries int          `json:"deliveries"`
	Headers    []jsonHeader `json:"headers,omitempty"`
	Body       *string      `json:"body,omitempty"`
	BodyBase64 string       `json:"body_base64,omitempty"`
}

func printDelivery(w io.Writer, d *client.Delivery, asJSON bool) error {
	if asJSON {
		j := jsonDelivery{Queue: d.Queue, Partition: d.Partition, Offset: d.Offset, ID: d.ID, Deliveries: d.Deliveries}
		for _, h := range d.Headers {
			j.Headers = append(j.Headers, jsonHeader{Key: h.Key, Value: h.Value})
		}
		if utf8.Valid(d.Body) {
			s := string(d.Body)
			j.Body = &s
		} else {
			j.BodyBase64 = base64.StdEncoding.EncodeToString(d.Body)
		}
		return writeJSON(w, j)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "partition=%d offset=%d", d.Partition, d.Offset)
	if d.ID != "" {
		fmt.Fprintf(&b, " id=%s", d.ID)
	}
	if d.Deliveries > 1 {
		fmt.Fprintf(&b, " deliveries=%d", d.Deliveries)
	}
	for _, h := range d.Headers {
		fmt.Fprintf(&b, " %s=%s", h.Key, printable([]byte(h.Value)))
	}
	fmt.Fprintf(&b, "\t%s\n", printable(d.Body))
	_, err := io.WriteString(w, b.String())
	return err
}
