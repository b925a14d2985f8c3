package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"unicode/utf8"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/spf13/pflag"

	"github.com/fibril-edge/fibril/wal"
)

const logDumpHelp = `Usage: fibril log dump DIR [flags]

Prints the records of one segment log offline, read-only: DIR is a log
directory (it holds *.seg files), e.g. DATA/queues/NAME/0 for partition 0
of queue NAME. Each record prints as "OFFSET TYPE LENGTH PREVIEW"; the
preview is the payload's first --preview bytes, as text when they are
text, else in hex. With --json each record is one line
{"offset","type","type_name","length","preview"}.

Record types in a queue partition's log: 1 publish, 2 ack, 3 release (nack
with requeue), 4 discard, 5 dead_letter, 6 expire, 7 marker, 8
publish_keyed. A publish payload holds the publish time, message ID (and
for publish_keyed the key) and headers ahead of the body.

Records that do not verify end the dump of their segment; they are
reported on stderr and the exit status is 1.
`

// recordTypeNames mirrors the record types of package appliance
// (events.go); the log itself gives types no meaning.
var recordTypeNames = map[byte]string{
	1: "publish", 2: "ack", 3: "release", 4: "discard", 5: "dead_letter", 6: "expire",
	7: "marker", 8: "publish_keyed",
}

type dumpLine struct {
	Offset   uint64 `json:"offset"`
	Type     byte   `json:"type"`
	TypeName string `json:"type_name"`
	Length   int    `json:"length"`
	Preview  string `json:"preview"`
}

// runLogDump is "fibril log dump".
func runLogDump(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := pflag.NewFlagSet("fibril log dump", pflag.ContinueOnError)
	from := flags.Uint64("from", 0, "first offset to print")
	maxN := flags.Uint64("max", 0, "most records to print (0: all)")
	preview := flags.Int("preview", 48, "payload bytes to preview")
	asJSON := flags.Bool("json", false, "print one JSON object per record")
	if done, err := parseFlags(flags, logDumpHelp, args, stdout); done || err != nil {
		return err
	}
	if err := wantArgs(flags, 1, 1, "DIR"); err != nil {
		return err
	}
	if *preview < 0 {
		return usagef("--preview %d: must not be negative", *preview)
	}
	dir := filepath.Clean(flags.Arg(0))
	logs, _, err := findLogs(dir)
	if err != nil {
		return err
	}
	if len(logs) != 1 || logs[0] != dir {
		return withExit(exitNotFound, fmt.Errorf("%s holds no segment files (*.seg): name one log directory, such as DATA/queues/NAME/0", dir))
	}
	opts := wal.VerifyOptions{From: *from}
	if *maxN > 0 {
		opts.To = *from + *maxN
	}
	var printed uint64
	var werr error
	opts.Visit = func(r wal.Record) {
		if r.Offset < *from || werr != nil || (*maxN > 0 && printed >= *maxN) || ctx.Err() != nil {
			return
		}
		printed++
		line := dumpLine{Offset: r.Offset, Type: r.Type, TypeName: recordTypeNames[r.Type],
			Length: len(r.Payload), Preview: previewBytes(r.Payload, *preview)}
		if line.TypeName == "" {
			line.TypeName = "unknown"
		}
		if *asJSON {
			werr = writeJSON(stdout, line)
			return
		}
		_, werr = fmt.Fprintf(stdout, "%d\t%s\t%d\t%s\n", line.Offset, line.TypeName, line.Length, line.Preview)
	}
	rep, err := wal.Verify(vfs.Default, dir, opts)
	if err != nil {
		return fmt.Errorf("dump %s: %w", dir, err)
	}
	if werr != nil {
		return werr
	}
	if t := rep.TornTail(); t != nil {
		fmt.Fprintf(stderr, "torn tail: %v\n", t)
	}
	for _, c := range rep.Corrupt {
		fmt.Fprintf(stderr, "corrupt: %v\n", c)
	}
	if len(rep.Corrupt) > 0 {
		return fmt.Errorf("%d corrupt places; run `fibril log verify %s` for the whole picture", len(rep.Corrupt), dir)
	}
	return ctx.Err()
}

// previewBytes shows the first n bytes of p as text if they are printable
// UTF-8, else as hex; "..." marks a cut.
func previewBytes(p []byte, n int) string {
	cut := len(p) > n
	b := p[:min(n, len(p))]
	text := b
	for i := 0; i < utf8.UTFMax-1 && cut && len(text) > 0 && !utf8.Valid(text); i++ {
		text = text[:len(text)-1] // a rune split by the cut
	}
	s := hex.EncodeToString(b)
	if utf8.Valid(text) && printable(text) == string(text) {
		s = string(text)
	}
	if cut {
		s += "..."
	}
	return s
}
