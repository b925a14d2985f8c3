package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"reflect"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Small files beside the segments, each 12 bytes: a uint64 and the CRC32C of
// it. They are replaced atomically: write a temporary, sync, rename, sync the
// directory.
const (
	cutMarkerName = "latched-cut.pending"
	epochName     = "EPOCH"
	tmpSuffix     = ".tmp"
)

func writeCutMarker(fs vfs.FS, dirFile syncer, dir string, offset uint64) error {
	return writeValueFile(fs, dirFile, dir, cutMarkerName, offset)
}

func readCutMarker(fs vfs.FS, dir string) (uint64, bool, error) {
	return readValueFile(fs, dir, cutMarkerName)
}

// unwrittenCuts holds, for the life of the process, the cut of each
// latched log whose cut marker could not be written (the same failing
// disk): the records its failed sync lost may still read back from the
// page cache, and the kernel reported that sync's error once, to the
// descriptor that is gone, so a reopen's own sync would not. An Open in
// this process cuts there as it would at the marker; the log's Close
// tries the marker again, for an Open in the next process.
var unwrittenCuts = struct {
	sync.Mutex
	at map[processLockKey]uint64
}{at: map[processLockKey]uint64{}}

// rememberCut keeps a cut whose marker could not be written.
func rememberCut(fs vfs.FS, dir string, to uint64) {
	if !reflect.TypeOf(fs).Comparable() {
		return
	}
	k := dirKey(fs, dir)
	unwrittenCuts.Lock()
	defer unwrittenCuts.Unlock()
	if at, ok := unwrittenCuts.at[k]; !ok || to < at {
		unwrittenCuts.at[k] = to
	}
}

// pendingCut is the cut an Open carries out: the marker's, or a lower
// one this process could not write. One remembered for a directory that
// holds no segments now is another log's (the queue was deleted and made
// again): it is dropped.
func pendingCut(fs vfs.FS, dir string, existed bool) (uint64, bool, error) {
	to, ok, err := readCutMarker(fs, dir)
	if err != nil || !reflect.TypeOf(fs).Comparable() {
		return to, ok, err
	}
	unwrittenCuts.Lock()
	defer unwrittenCuts.Unlock()
	k := dirKey(fs, dir)
	if !existed {
		delete(unwrittenCuts.at, k)
		return to, ok, nil
	}
	if at, held := unwrittenCuts.at[k]; held && (!ok || at < to) {
		return at, true, nil
	}
	return to, ok, nil
}

// forgetCut drops the cut remembered for dir once an Open carried it out.
func forgetCut(fs vfs.FS, dir string) {
	if !reflect.TypeOf(fs).Comparable() {
		return
	}
	unwrittenCuts.Lock()
	delete(unwrittenCuts.at, dirKey(fs, dir))
	unwrittenCuts.Unlock()
}

func writeEpoch(fs vfs.FS, dirFile syncer, dir string, epoch uint64) error {
	return writeValueFile(fs, dirFile, dir, epochName, epoch)
}

func readEpoch(fs vfs.FS, dir string) (uint64, error) {
	v, _, err := readValueFile(fs, dir, epochName)
	return v, err
}

// CutBack makes the next Open of the closed log in dir end at offset to:
// every record at or past it goes before anything can read the log (a
// cut below the head leaves an empty log starting at to). It is how a
// replica drops the records it holds past where it diverges from the
// history a recovery installed. It is crash safe: the cut is recorded in
// latched-cut.pending, replaced atomically, and carried out by Open; a
// cut already pending at a lower offset is kept.
func CutBack(fs vfs.FS, dir string, to uint64) error {
	if fs == nil {
		fs = vfs.Default
	}
	if pending, ok, err := readCutMarker(fs, dir); err != nil {
		return err
	} else if ok && pending <= to {
		return nil
	}
	return LoseUnsyncedOnNextOpen(fs, dir, to)
}

// LoseUnsyncedOnNextOpen makes the next Open of the closed log in dir cut it
// back to durableNext, as a power loss that dropped everything after that
// offset would. It simulates power loss on real directories, where the page
// cache cannot be dropped, and uses the same cut as a latched log's heal.
func LoseUnsyncedOnNextOpen(fs vfs.FS, dir string, durableNext uint64) error {
	if fs == nil {
		fs = vfs.Default
	}
	return writeCutMarker(fs, dirSyncer{fs, dir}, dir, durableNext)
}

func writeValueFile(fs vfs.FS, dirFile syncer, dir, name string, v uint64) error {
	b := make([]byte, 12)
	binary.LittleEndian.PutUint64(b, v)
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(b[:8], castagnoli))
	return writeSynced(fs, dirFile, dir, name, b)
}

// WriteFileSynced writes data as dir/name, crash-safe: a synced temporary
// file renamed over the old one, then the directory synced. After a crash
// the file holds the old content or the new, never part of either.
func WriteFileSynced(fs vfs.FS, dir, name string, data []byte) error {
	return writeSynced(fs, dirSyncer{fs, dir}, dir, name, data)
}

func writeSynced(fs vfs.FS, dirFile syncer, dir, name string, b []byte) error {
	tmp := fs.PathJoin(dir, name+tmpSuffix)
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("wal: create %s: %w", name, err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, fs.PathJoin(dir, name))
	}
	if err == nil {
		err = dirFile.Sync()
	}
	if err != nil {
		return fmt.Errorf("wal: write %s: %w", name, err)
	}
	return nil
}

// ReadSmallFile returns the first max bytes of dir/name, and false when
// there is no such file.
func ReadSmallFile(fs vfs.FS, dir, name string, max int64) ([]byte, bool, error) {
	f, err := fs.Open(fs.PathJoin(dir, name))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("wal: open %s: %w", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max))
	if err != nil {
		return nil, false, fmt.Errorf("wal: read %s: %w", name, err)
	}
	return b, true, nil
}

// readValueFile returns the value in dir/name, and false when there is none.
func readValueFile(fs vfs.FS, dir, name string) (uint64, bool, error) {
	b, ok, err := ReadSmallFile(fs, dir, name, 12)
	if !ok || err != nil {
		return 0, false, err
	}
	if len(b) < 12 {
		return 0, false, fmt.Errorf("wal: read %s: %w", name, io.ErrUnexpectedEOF)
	}
	if binary.LittleEndian.Uint32(b[8:]) != crc32.Checksum(b[:8], castagnoli) {
		return 0, false, fmt.Errorf("wal: %s checksum mismatch", name)
	}
	return binary.LittleEndian.Uint64(b), true, nil
}

// syncer is what a directory sync needs: dirSyncer, or an open directory.
type syncer interface{ Sync() error }

// dirSyncer syncs a directory by opening it for each sync. A log's
// directory syncs are rare (a segment created or removed, a marker or the
// incarnation written), so a log holds no descriptor for its directory:
// an idle log keeps its lock and its active segment open, nothing more.
type dirSyncer struct {
	fs   vfs.FS
	path string
}

func (d dirSyncer) Sync() error {
	f, err := d.fs.OpenDir(d.path)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", d.path, err)
	}
	return errors.Join(f.Sync(), f.Close())
}
