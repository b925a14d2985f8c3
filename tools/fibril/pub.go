package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/fibril-edge/fibril/appliance/client"
)

const pubHelp = `Usage: fibril pub QUEUE [MESSAGE...] [flags]

Publishes messages to QUEUE over the client protocol and waits for each
confirm: for a durable queue that means synced to disk, for a buffered one
handed to the operating system. The messages are the arguments; "-" (or no
message at all) reads one message per line from stdin.

Each confirm prints "partition=P offset=O" (with "duplicate" when the
queue's dedupe window already held the ID), or with --json one line
{"queue","partition","offset","duplicate"}.

--count N (bulk publish) sends every message argument N times (stdin is
read once) and prints one summary instead of a line per confirm, or with
--json {"queue","published","duplicates","seconds"}; a progress bar goes to
stderr when it is a terminal, or always with --progress.

--id names the message for the queue's dedupe window. With more than one
message to send, the i-th (from 1) gets the ID "<id>-<i>".
`

// runPub is "fibril pub".
func runPub(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("fibril pub", pflag.ContinueOnError)
	var conn connFlags
	id := fs.String("id", "", "message ID for the dedupe window")
	key := fs.String("key", "", "partition key: equal keys go to the same partition, in order")
	headers := fs.StringArray("header", nil, "header KEY=VALUE (repeatable)")
	count := fs.Int("count", 1, "send every message this many times")
	progress := fs.Bool("progress", false, "draw the progress bar even when stderr is not a terminal")
	conn.addServerFlags(fs)
	if done, err := parseFlags(fs, pubHelp, args, stdout); done || err != nil {
		return err
	}
	if err := wantArgs(fs, 1, -1, "QUEUE"); err != nil {
		return err
	}
	if *count < 1 {
		return usagef("--count %d: must be at least 1", *count)
	}
	var hs []client.Header
	for _, h := range *headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return usagef("--header %q: want KEY=VALUE", h)
		}
		hs = append(hs, client.Header{Key: k, Value: v})
	}
	queue, bodies := fs.Arg(0), fs.Args()[1:]
	if len(bodies) == 0 {
		bodies = []string{"-"}
	}
	cl, err := conn.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()

	p := &publisher{ctx: ctx, cl: cl, queue: queue, id: *id, key: *key, headers: hs,
		summary: *count > 1, json: conn.json, stdout: stdout, stderr: stderr,
		pending: make(chan *client.Future, 4096), failed: make(chan struct{})}
	fromStdin := slices.Contains(bodies, "-")
	if p.summary {
		p.bar = newProgress(stderr, *progress, "publishing", nil)
		if !fromStdin {
			p.total = int64(len(bodies) * *count) // unknown with stdin
		}
	}
	p.multi = *count > 1 || len(bodies) > 1 || fromStdin
	return p.run(bodies, *count)
}

// publisher sends messages with PublishAsync and prints their confirms
// in order from a second goroutine.
type publisher struct {
	ctx               context.Context
	cl                *client.Client
	queue, id, key    string
	headers           []client.Header
	summary, json     bool
	multi             bool
	stdout, stderr    io.Writer
	bar               *progressBar
	total             int64
	pending           chan *client.Future
	failed            chan struct{} // closed by confirm at its first error
	seq               int
	published, duplic int64 // owned by confirm until it returns
}

func (p *publisher) run(bodies []string, count int) error {
	start := time.Now()
	confirmed := make(chan error, 1)
	go func() { confirmed <- p.confirm() }()
	sendErr := p.send(bodies, count)
	close(p.pending)
	if err := <-confirmed; err != nil {
		return err
	}
	if sendErr != nil {
		return sendErr
	}
	if !p.summary {
		return nil
	}
	p.bar.Done(p.published, p.total)
	secs := time.Since(start).Seconds()
	if p.json {
		return writeJSON(p.stdout, map[string]any{"queue": p.queue, "published": p.published,
			"duplicates": p.duplic, "seconds": secs})
	}
	_, err := fmt.Fprintf(p.stdout, "published %d messages to %s in %.2fs (%.0f/s, %d duplicates)\n",
		p.published, p.queue, secs, float64(p.published)/max(secs, 1e-9), p.duplic)
	return err
}

// send publishes every body count times, reading "-" from stdin.
func (p *publisher) send(bodies []string, count int) error {
	for range count {
		for _, b := range bodies {
			if b != "-" {
				if err := p.publish([]byte(b)); err != nil {
					return err
				}
				continue
			}
			if isTerminal(os.Stdin) {
				fmt.Fprintln(p.stderr, "reading messages from the terminal, one per line; end with Ctrl-D")
			}
			sc := bufio.NewScanner(os.Stdin)
			sc.Buffer(make([]byte, 64<<10), 16<<20)
			for sc.Scan() {
				if err := p.publish(append([]byte(nil), sc.Bytes()...)); err != nil {
					return err
				}
			}
			if err := sc.Err(); err != nil {
				return fmt.Errorf("read stdin: %w", err)
			}
		}
	}
	return nil
}

func (p *publisher) publish(body []byte) error {
	if err := p.ctx.Err(); err != nil {
		return err
	}
	p.seq++
	m := client.Message{ID: p.id, Key: p.key, Headers: p.headers, Body: body}
	if p.id != "" && p.multi {
		m.ID = fmt.Sprintf("%s-%d", p.id, p.seq)
	}
	select {
	case <-p.failed:
		return errStopped
	default:
	}
	select {
	case p.pending <- p.cl.PublishAsync(p.queue, m):
		return nil
	case <-p.failed:
		return errStopped
	case <-p.ctx.Done():
		return p.ctx.Err()
	}
}

// confirm waits for the futures in order and prints each confirm, or
// counts them for the summary. It stops at the first failure.
func (p *publisher) confirm() error {
	var first error
	for f := range p.pending {
		if first != nil {
			continue // drain; the sender stops soon
		}
		c, err := f.Wait(p.ctx)
		if err != nil {
			first = fmt.Errorf("publish to %s: %w", p.queue, publishAdvice(err))
			close(p.failed)
			continue
		}
		var werr error
		p.published++
		if c.Duplicate {
			p.duplic++
		}
		switch {
		case p.summary:
			p.bar.Update(p.published, p.total)
		case p.json:
			werr = writeJSON(p.stdout, map[string]any{"queue": p.queue, "partition": c.Partition,
				"offset": c.Offset, "duplicate": c.Duplicate})
		default:
			dup := ""
			if c.Duplicate {
				dup = " duplicate"
			}
			_, werr = fmt.Fprintf(p.stdout, "partition=%d offset=%d%s\n", c.Partition, c.Offset, dup)
		}
		if werr != nil {
			first = werr
			close(p.failed)
		}
	}
	return first
}

// publishAdvice adds what to do to the broker's common refusals.
func publishAdvice(err error) error {
	switch {
	case isNotFound(err):
		return fmt.Errorf("%w (declare it first: fibril queue declare NAME)", err)
	case isFull(err):
		return fmt.Errorf("%w (consume some messages or raise the queue's limits)", err)
	}
	return err
}

func isNotFound(err error) bool { return exitCode(err) == exitNotFound }

func isFull(err error) bool {
	return errors.Is(err, client.ErrQueueFull) || errors.Is(err, client.ErrDiskFull)
}

// errStopped ends sending once a confirm has failed; confirm's error is
// the one reported.
var errStopped = errors.New("publishing stopped")
