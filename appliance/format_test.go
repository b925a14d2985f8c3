package appliance

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The golden files under testdata/golden hold what the broker stores, as
// this version writes it: a declaration and the runtime settings (JSON in
// the metadata store), a partition snapshot, and the publish and settle
// records of a queue log. Every later version must decode them to the same
// values, and write the same bytes for the same values. `go test -run
// TestPersistedFormats -update` rewrites them; do that only with a
// migration for the stores already out there.
var update = flag.Bool("update", false, "rewrite the golden files of persisted formats")

var goldenAt = time.Date(2026, 12, 1, 9, 30, 0, 123456789, time.UTC)

func goldenQueueConfig() QueueConfig {
	return QueueConfig{Name: "orders", Durability: Buffered, Partitions: 3, DeadLetter: "orders-dlq",
		MaxDeliveries: 5, AckDeadline: 45 * time.Second, MaxBytes: 64 << 20, MaxMessages: 100000,
		Overflow: OverflowDropOldest, DedupeWindow: 2 * time.Minute}
}

func goldenSnapshot() snapshot {
	return snapshot{Boundary: 42,
		Messages: []message{
			{offset: 7, size: 120, deliveries: 2, at: goldenAt, id: "m-7"},
			{offset: 40, size: 1, at: goldenAt.Add(time.Second)},
		},
		Dedupe: []dedupeRecord{{ID: "m-7", Offset: 7, At: goldenAt}}}
}

func goldenPublish() publishRecord {
	return publishRecord{At: goldenAt, MessageID: "m-7",
		Headers: []Header{{Key: "content-type", Value: "text/plain"}, {Key: "site", Value: "7"}},
		Body:    []byte("hello")}
}

// goldenKeyedPublish is goldenPublish with a key: a recPublishKeyed.
func goldenKeyedPublish() publishRecord {
	p := goldenPublish()
	p.Key = "site-7"
	return p
}

func TestPersistedFormats(t *testing.T) {
	for _, tc := range []struct {
		file   string
		encode func() ([]byte, error)
		decode func([]byte) (any, error)
		want   any
	}{
		{"queue-config.json",
			func() ([]byte, error) { return json.Marshal(goldenQueueConfig()) },
			func(b []byte) (any, error) { var c QueueConfig; err := json.Unmarshal(b, &c); return c, err },
			goldenQueueConfig()},
		{"settings.json",
			func() ([]byte, error) {
				return json.Marshal(Settings{BackgroundSyncIntervalMs: 250, BufferedCoalesce: "window", BufferedGapUs: 80})
			},
			func(b []byte) (any, error) { var s Settings; err := json.Unmarshal(b, &s); return s, err },
			Settings{BackgroundSyncIntervalMs: 250, BufferedCoalesce: "window", BufferedGapUs: 80}},
		{"snapshot.hex",
			func() ([]byte, error) { return goldenSnapshot().encode(), nil },
			func(b []byte) (any, error) { return decodeSnapshot(b) },
			goldenSnapshot()},
		{"publish-record.hex",
			func() ([]byte, error) { return encodePublish(goldenPublish()), nil },
			func(b []byte) (any, error) { return decodePublish(recPublish, b) },
			goldenPublish()},
		{"publish-keyed-record.hex",
			func() ([]byte, error) { return encodePublish(goldenKeyedPublish()), nil },
			func(b []byte) (any, error) { return decodePublish(recPublishKeyed, b) },
			goldenKeyedPublish()},
		{"settle-record.hex",
			func() ([]byte, error) { return encodeSettle(1 << 40), nil },
			func(b []byte) (any, error) { return decodeSettle(b) },
			uint64(1 << 40)},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", "golden", tc.file)
			got, err := tc.encode()
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				writeGolden(t, path, got)
			}
			golden := readGolden(t, path)
			if !bytes.Equal(got, golden) {
				t.Errorf("this version writes\n%x\nwhere %s holds\n%x", got, path, golden)
			}
			v, err := tc.decode(golden)
			if err != nil {
				t.Fatalf("decode %s: %v", path, err)
			}
			if !reflect.DeepEqual(normalize(v), normalize(tc.want)) {
				t.Errorf("%s decodes to\n%+v\nwant\n%+v", path, v, tc.want)
			}
		})
	}
}

// normalize drops the monotonic clock and location from times, which a
// decoded time never has, so values compare by instant.
func normalize(v any) any {
	switch x := v.(type) {
	case snapshot:
		for i := range x.Messages {
			x.Messages[i].at = x.Messages[i].at.UTC()
		}
		for i := range x.Dedupe {
			x.Dedupe[i].At = x.Dedupe[i].At.UTC()
		}
		return x
	case publishRecord:
		x.At = x.At.UTC()
		return x
	}
	return v
}

// Binary formats are stored as hex, one line, so a diff shows them.
func writeGolden(t *testing.T, path string, b []byte) {
	t.Helper()
	if strings.HasSuffix(path, ".hex") {
		b = []byte(hex.EncodeToString(b) + "\n")
	} else {
		b = append(b, '\n')
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readGolden(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	if strings.HasSuffix(path, ".hex") {
		if b, err = hex.DecodeString(string(b)); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	return b
}
