package wire

import (
	"io"
	"testing"
)

// BenchmarkWriteConfirm writes the frame the broker sends for every
// publish: a Confirm, validated and encoded into the writer's buffer.
func BenchmarkWriteConfirm(b *testing.B) {
	w := NewWriter(io.Discard, Options{})
	w.SetVersion(Version)
	f := &Confirm{Corr: 1, Partition: 3, Offset: 1 << 20, Durability: DurabilityBuffered}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		f.Corr = uint64(i)
		if err := w.WriteFrame(f); err != nil {
			b.Fatal(err)
		}
		if i%64 == 63 {
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
