package appliance

import (
	"testing"
	"time"
)

// BenchmarkSnapshotRestore decodes and restores a partition of a million
// unsettled messages, as an open does from its checkpoint (1 GiB of 1 KiB
// messages).
func BenchmarkSnapshotRestore(b *testing.B) {
	const n = 1 << 20
	snap := snapshot{Boundary: n, Messages: make([]message, n)}
	at := time.Now()
	for i := range snap.Messages {
		snap.Messages[i] = message{offset: uint64(i), size: 1100, at: at}
	}
	enc := snap.encode()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		dec, err := decodeSnapshot(enc)
		if err != nil {
			b.Fatal(err)
		}
		if st := dec.restore(); st.count != n {
			b.Fatalf("restored %d messages", st.count)
		}
	}
}
