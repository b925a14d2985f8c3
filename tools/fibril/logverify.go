package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/spf13/pflag"

	"github.com/fibril-edge/fibril/wal"
)

const logVerifyHelp = `Usage: fibril log verify DIR [flags]

Checks segment logs offline, without changing a byte: every segment header
and every record's checksum, offset and type. DIR is one log directory (it
holds *.seg files) or any directory above logs, such as fibrild's data
directory: every log found below it is checked. It takes no lock, so it can
run while fibrild is up (records being appended then may read as a torn
tail); for a verdict to act on, stop fibrild first.

One line per log says how many segments and records it holds and what it
found:
  ok          every record verifies
  torn tail   the last segment ends in a partial record, as a crash
              mid-write leaves it; fibrild cuts it at start and loses only
              records that were never confirmed as durable
  CORRUPT     a bad record or header elsewhere, with segment, byte
              position and offset. Each damaged range (bad records with
              valid records after them) is listed with its bytes, the
              offsets it held and the records lost with it; fibrild keeps
              its bytes aside, serves the records after it and counts the
              lost ones. A sealed segment with a bad header costs the
              whole segment.
The last line of a damaged log counts the records lost in all.
With --json each log is one line {"dir","segments","records","bytes",
"torn_tail","corrupt","damaged","lost_records","quarantined",
"pending_cut"}; each damaged range is {"segment","pos","end","from","to",
"lost","reason"}.

Exit status 1 when any log is corrupt or damaged, 0 otherwise (torn tails
included).
A progress bar goes to stderr when it is a terminal, or always with
--progress.
`

// runLogVerify is "fibril log verify".
func runLogVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := pflag.NewFlagSet("fibril log verify", pflag.ContinueOnError)
	asJSON := flags.Bool("json", false, "print one JSON object per log")
	progress := flags.Bool("progress", false, "draw the progress bar even when stderr is not a terminal")
	if done, err := parseFlags(flags, logVerifyHelp, args, stdout); done || err != nil {
		return err
	}
	if err := wantArgs(flags, 1, 1, "DIR"); err != nil {
		return err
	}
	root := flags.Arg(0)
	logs, total, err := findLogs(root)
	if err != nil {
		return err
	}
	if len(logs) == 0 {
		return withExit(exitNotFound, fmt.Errorf("no segment files (*.seg) in or below %s: is it a log or data directory?", root))
	}
	bar := newProgress(stderr, *progress, "verifying", byteUnit)
	var done int64
	corrupt := 0
	for _, dir := range logs {
		if err := ctx.Err(); err != nil {
			return err
		}
		base := done
		rep, err := wal.Verify(vfs.Default, dir, wal.VerifyOptions{
			Progress: func(scanned, _ int64) { bar.Update(base+scanned, total) },
		})
		if err != nil {
			return fmt.Errorf("verify %s: %w", dir, err)
		}
		done += rep.Bytes
		if len(rep.Corrupt) > 0 {
			corrupt++
		}
		name := relName(root, dir)
		if *asJSON {
			err = writeJSON(stdout, verifyJSON(name, rep))
		} else {
			err = printVerify(stdout, name, rep)
		}
		if err != nil {
			return err
		}
	}
	bar.Done(done, total)
	if corrupt > 0 {
		return fmt.Errorf("%d of %d logs are corrupt", corrupt, len(logs))
	}
	return nil
}

// findLogs returns every directory at or below root that holds segment
// files, sorted, and the bytes of those files.
func findLogs(root string) ([]string, int64, error) {
	var logs []string
	var total int64
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !isSegmentFile(d.Name()) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		total += info.Size()
		if dir := filepath.Dir(path); !seen[dir] {
			seen[dir] = true
			logs = append(logs, dir)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, 0, withExit(exitNotFound, fmt.Errorf("%s does not exist", root))
		}
		return nil, 0, fmt.Errorf("look for logs in %s: %w", root, err)
	}
	sort.Strings(logs)
	return logs, total, nil
}

func isSegmentFile(name string) bool {
	digits, ok := strings.CutSuffix(name, ".seg")
	return ok && len(digits) == 20 && strings.Trim(digits, "0123456789") == ""
}

func relName(root, dir string) string {
	if rel, err := filepath.Rel(root, dir); err == nil && rel != "." {
		return rel
	}
	return dir
}

func printVerify(w io.Writer, name string, rep wal.VerifyReport) error {
	verdict := "ok"
	if t := rep.TornTail(); t != nil {
		verdict = fmt.Sprintf("torn tail in segment %020d at byte %d (offset %d: %s); fibrild will cut it at start",
			t.Segment, t.Pos, t.Offset, t.Reason)
	}
	if len(rep.Corrupt) > 0 {
		verdict = "CORRUPT"
	}
	_, err := fmt.Fprintf(w, "%s: %d segments, %d records, %s: %s\n", name, len(rep.Segments), rep.Records, byteUnit(rep.Bytes), verdict)
	damaged := map[wal.CorruptionError]bool{}
	for _, d := range rep.Damaged {
		fmt.Fprintf(w, "  damaged: segment %020d bytes %d to %d, offsets %d to %d: %d records lost (%s)\n",
			d.Segment, d.Pos, d.End, d.From, d.To, d.Lost(), d.Reason)
		damaged[*d.Err()] = true
	}
	for _, c := range rep.Corrupt {
		if !damaged[*c] {
			fmt.Fprintf(w, "  corrupt: segment %020d at byte %d (expected offset %d): %s\n", c.Segment, c.Pos, c.Offset, c.Reason)
		}
	}
	for _, q := range rep.Quarantined {
		fmt.Fprintf(w, "  quarantined: segment %020d (set aside as corrupt earlier)\n", q)
	}
	if rep.PendingCut {
		fmt.Fprintf(w, "  pending cut: the next start cuts the log back to offset %d (a write or sync failed)\n", rep.CutTo)
	}
	if rep.LostRecords > 0 {
		fmt.Fprintf(w, "  lost: %d records\n", rep.LostRecords)
	}
	return err
}

// corruptionJSON is a position in --json output.
type corruptionJSON struct {
	Segment uint64 `json:"segment"`
	Pos     int64  `json:"pos"`
	Offset  uint64 `json:"offset"`
	Reason  string `json:"reason"`
}

// damageJSON is a damaged range in --json output.
type damageJSON struct {
	Segment uint64 `json:"segment"`
	Pos     int64  `json:"pos"`
	End     int64  `json:"end"`
	From    uint64 `json:"from"`
	To      uint64 `json:"to"`
	Lost    uint64 `json:"lost"`
	Reason  string `json:"reason"`
}

type verifyLine struct {
	Dir         string           `json:"dir"`
	Segments    int              `json:"segments"`
	Records     uint64           `json:"records"`
	Bytes       int64            `json:"bytes"`
	TornTail    *corruptionJSON  `json:"torn_tail"`
	Corrupt     []corruptionJSON `json:"corrupt"`
	Damaged     []damageJSON     `json:"damaged"`
	LostRecords uint64           `json:"lost_records"`
	Quarantined []uint64         `json:"quarantined"`
	PendingCut  *uint64          `json:"pending_cut"`
}

func verifyJSON(name string, rep wal.VerifyReport) verifyLine {
	conv := func(c *wal.CorruptionError) corruptionJSON {
		return corruptionJSON{Segment: c.Segment, Pos: c.Pos, Offset: c.Offset, Reason: c.Reason}
	}
	line := verifyLine{Dir: name, Segments: len(rep.Segments), Records: rep.Records, Bytes: rep.Bytes,
		Corrupt: []corruptionJSON{}, Damaged: []damageJSON{}, LostRecords: rep.LostRecords, Quarantined: rep.Quarantined}
	for _, d := range rep.Damaged {
		line.Damaged = append(line.Damaged, damageJSON{Segment: d.Segment, Pos: d.Pos, End: d.End,
			From: d.From, To: d.To, Lost: d.Lost(), Reason: d.Reason})
	}
	if line.Quarantined == nil {
		line.Quarantined = []uint64{}
	}
	if t := rep.TornTail(); t != nil {
		c := conv(t)
		line.TornTail = &c
	}
	for _, c := range rep.Corrupt {
		line.Corrupt = append(line.Corrupt, conv(c))
	}
	if rep.PendingCut {
		line.PendingCut = &rep.CutTo
	}
	return line
}
